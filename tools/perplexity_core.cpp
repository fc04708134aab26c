#include "tools/perplexity_core.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "common/ggml_types.h"
#include "worker/stage_model.h"

namespace ds::ppl {

namespace {

constexpr char kMagic[8] = {'D', 'S', 'P', 'P', 'L', 'K', 'L', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 4 + 4 + 8;
constexpr double kLowestHalf = -65504.0;  // the most negative finite f16

size_t record_bytes(uint32_t n_vocab) {
  return 8 + 4 + 4 + 2 * static_cast<size_t>(n_vocab);
}

template <typename T>
void put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out->append(b, sizeof(T));
}

template <typename T>
T get(const char** p) {
  T v;
  std::memcpy(&v, *p, sizeof(T));
  *p += sizeof(T);
  return v;
}

std::FILE* open_file(const std::string& path, const char* mode, const char* what) {
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (!f) throw PplError(std::string("cannot open ") + what + " '" + path + "': " + std::strerror(errno));
  return f;
}

void check_same(const char* what, uint64_t base, uint64_t run, const std::string& path) {
  if (base == run) return;
  throw PplError("base file '" + path + "' was made with " + what + " " + std::to_string(base) + ", this run has " +
                 std::to_string(run) + ": it belongs to another input or model");
}

BaseHeader parse_header(const char* bytes, const std::string& path) {
  if (std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0)
    throw PplError("'" + path + "' is not a deltaserve-perplexity base file (bad magic)");
  const char* p = bytes + sizeof(kMagic);
  const uint32_t version = get<uint32_t>(&p);
  if (version != kVersion)
    throw PplError("base file '" + path + "' has version " + std::to_string(version) + ", this tool reads " +
                   std::to_string(kVersion));
  BaseHeader h;
  h.n_vocab = get<uint32_t>(&p);
  h.n_positions = get<uint64_t>(&p);
  h.n_ids = get<uint64_t>(&p);
  h.ctx = get<uint32_t>(&p);
  (void)get<uint32_t>(&p);  // reserved
  h.ids_hash = get<uint64_t>(&p);
  return h;
}

BaseHeader read_header(std::FILE* f, const std::string& path) {
  char bytes[kHeaderBytes];
  if (std::fread(bytes, 1, kHeaderBytes, f) != kHeaderBytes)
    throw PplError("base file '" + path + "' is too short for its header");
  return parse_header(bytes, path);
}

// The file's size must be the header plus n_positions records: a truncated base is refused up front.
void check_size(std::FILE* f, const BaseHeader& h, const std::string& path) {
  if (std::fseek(f, 0, SEEK_END) != 0) throw PplError("cannot seek in base file '" + path + "'");
  const long size = std::ftell(f);
  const uint64_t want = kHeaderBytes + h.n_positions * record_bytes(h.n_vocab);
  if (size < 0 || static_cast<uint64_t>(size) != want)
    throw PplError("base file '" + path + "' has " + std::to_string(size) + " bytes, its header says " +
                   std::to_string(want) + " (truncated or corrupt)");
  if (std::fseek(f, static_cast<long>(kHeaderBytes), SEEK_SET) != 0)
    throw PplError("cannot seek in base file '" + path + "'");
}

// Nearest-rank percentile of `v` (q in (0, 1]); 0 for an empty v.
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

void check_ids(const std::vector<int32_t>& ids, size_t n_vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || static_cast<size_t>(ids[i]) >= n_vocab)
      throw PplError("token id " + std::to_string(ids[i]) + " (item " + std::to_string(i) +
                     ") is outside the model's vocabulary of " + std::to_string(n_vocab));
  }
}

}  // namespace

std::vector<Window> cut_windows(size_t n_ids, size_t ctx) {
  if (n_ids == 0) throw PplError("no token ids to evaluate");
  const size_t len = ctx == 0 ? n_ids : ctx;
  std::vector<Window> w;
  for (size_t begin = 0; begin < n_ids; begin += len) w.push_back({begin, std::min(len, n_ids - begin)});
  return w;
}

size_t predicted_positions(const std::vector<Window>& windows) {
  size_t n = 0;
  for (const Window& w : windows) n += w.n_tokens - 1;
  return n;
}

uint64_t hash_ids(const std::vector<int32_t>& ids) {
  uint64_t h = 1469598103934665603ull;
  for (const int32_t id : ids) {
    const uint32_t u = static_cast<uint32_t>(id);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xFFu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

RowStats row_stats(const float* logits, size_t n_vocab, int32_t next, std::vector<double>* log_probs) {
  RowStats s;
  double max = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n_vocab; ++i) {
    if (static_cast<double>(logits[i]) > max) {
      max = logits[i];
      s.argmax = static_cast<int32_t>(i);
    }
  }
  double sum = 0;
  for (size_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  s.logsumexp = max + std::log(sum);
  s.nll = s.logsumexp - static_cast<double>(logits[next]);
  if (log_probs) {
    log_probs->resize(n_vocab);
    for (size_t i = 0; i < n_vocab; ++i) (*log_probs)[i] = static_cast<double>(logits[i]) - s.logsumexp;
  }
  return s;
}

BaseWriter::BaseWriter(const std::string& path, const BaseHeader& header)
    : path_(path), header_(header), f_(open_file(path + ".tmp", "wb", "base file for writing")), buf_(header.n_vocab) {
  std::string h(kMagic, sizeof(kMagic));
  put<uint32_t>(&h, kVersion);
  put<uint32_t>(&h, header.n_vocab);
  put<uint64_t>(&h, header.n_positions);
  put<uint64_t>(&h, header.n_ids);
  put<uint32_t>(&h, header.ctx);
  put<uint32_t>(&h, 0);
  put<uint64_t>(&h, header.ids_hash);
  if (std::fwrite(h.data(), 1, h.size(), f_) != h.size()) throw PplError("cannot write base file '" + path_ + "'");
}

BaseWriter::~BaseWriter() {
  if (!f_) return;
  std::fclose(f_);  // not finished (the run failed): no partial base file is left behind
  std::remove((path_ + ".tmp").c_str());
}

void BaseWriter::add(const RowStats& row, const std::vector<double>& log_probs) {
  if (written_ >= header_.n_positions) throw PplError("base file '" + path_ + "': more positions than announced");
  std::string r;
  put<double>(&r, row.nll);
  put<float>(&r, static_cast<float>(row.logsumexp));
  put<int32_t>(&r, row.argmax);
  for (size_t i = 0; i < buf_.size(); ++i) {
    const double lp = std::clamp(log_probs[i], kLowestHalf, 0.0);  // -inf (a masked logit) stays finite
    buf_[i] = fp32_to_fp16(static_cast<float>(lp));
  }
  const size_t n = buf_.size() * sizeof(uint16_t);
  if (std::fwrite(r.data(), 1, r.size(), f_) != r.size() || std::fwrite(buf_.data(), 1, n, f_) != n)
    throw PplError("cannot write base file '" + path_ + "' (disk full?)");
  ++written_;
}

void BaseWriter::finish() {
  if (written_ != header_.n_positions)
    throw PplError("base file '" + path_ + "': wrote " + std::to_string(written_) + " of " +
                   std::to_string(header_.n_positions) + " positions");
  const int rc = std::fclose(f_);
  f_ = nullptr;
  const std::string tmp = path_ + ".tmp";
  if (rc != 0 || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw PplError("cannot write base file '" + path_ + "' (disk full?)");
  }
}

BaseHeader base_header_for(const std::vector<int32_t>& ids, size_t n_vocab, size_t ctx) {
  const size_t len = ctx ? ctx : ids.size();
  return {static_cast<uint32_t>(n_vocab), predicted_positions(cut_windows(ids.size(), ctx)), ids.size(),
          static_cast<uint32_t>(len), hash_ids(ids)};
}

BaseReader::BaseReader(const std::string& path, const BaseHeader& expected)
    : path_(path), f_(open_file(path, "rb", "base file")) {
  try {
    header_ = read_header(f_, path);
    check_same("a vocabulary of", header_.n_vocab, expected.n_vocab, path);
    check_same("token ids numbering", header_.n_ids, expected.n_ids, path);
    check_same("windows of", header_.ctx, expected.ctx, path);
    check_same("predicted positions numbering", header_.n_positions, expected.n_positions, path);
    if (header_.ids_hash != expected.ids_hash)
      throw PplError("base file '" + path + "' was made from other token ids (ids hash differs)");
    check_size(f_, header_, path);
  } catch (...) {
    std::fclose(f_);
    f_ = nullptr;
    throw;
  }
  buf_.resize(header_.n_vocab);
}

BaseReader::~BaseReader() {
  if (f_) std::fclose(f_);
}

void BaseReader::next(BaseRow* row) {
  if (read_ >= header_.n_positions) throw PplError("base file '" + path_ + "': read past its last position");
  char head[16];
  const size_t n = buf_.size() * sizeof(uint16_t);
  if (std::fread(head, 1, sizeof(head), f_) != sizeof(head) || std::fread(buf_.data(), 1, n, f_) != n)
    throw PplError("base file '" + path_ + "': short read at position " + std::to_string(read_));
  const char* p = head;
  row->nll = get<double>(&p);
  row->logsumexp = get<float>(&p);
  row->argmax = get<int32_t>(&p);
  row->log_probs.resize(buf_.size());
  double max = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < buf_.size(); ++i) {
    row->log_probs[i] = fp16_to_fp32(buf_[i]);
    max = std::max(max, row->log_probs[i]);
  }
  row->probs.resize(buf_.size());
  double sum = 0;
  for (size_t i = 0; i < buf_.size(); ++i) sum += row->probs[i] = std::exp(row->log_probs[i] - max);
  const double lse = max + std::log(sum);
  for (double& lp : row->log_probs) lp -= lse;
  for (double& q : row->probs) q /= sum;
  ++read_;
}

double kl_divergence(const BaseRow& base, const std::vector<double>& run_log_probs) {
  double kl = 0;
  for (size_t i = 0; i < base.probs.size(); ++i) {
    if (base.probs[i] > 0) kl += base.probs[i] * (base.log_probs[i] - run_log_probs[i]);
  }
  return std::max(kl, 0.0);  // >= 0 in exact arithmetic; a -1e-17 from rounding is 0
}

WindowLogits stage_logits(StageModel& model, size_t chunk) {
  return [&model, chunk](size_t seq, const std::vector<int32_t>& tokens, std::vector<float>* logits) {
    logits->clear();
    const size_t step = chunk ? chunk : tokens.size();
    const size_t last_row = tokens.size() - 1;  // the last token predicts nothing: no row for it
    for (size_t begin = 0; begin < tokens.size(); begin += step) {
      const size_t end = std::min(tokens.size(), begin + step);
      ds::StepInput in;
      ds::SeqStep s;
      s.seq_id = seq + 1;
      s.start_pos = static_cast<uint32_t>(begin);
      s.token_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                         tokens.begin() + static_cast<std::ptrdiff_t>(end));
      for (size_t t = begin; t < std::min(end, last_row); ++t) s.logit_rows.push_back(static_cast<uint32_t>(t - begin));
      in.seqs.push_back(std::move(s));
      ds::StepOutput out;
      model.forward(in, &out);
      logits->insert(logits->end(), out.logits.begin(), out.logits.end());
    }
    model.drop_sequence(seq + 1);
  };
}

namespace {

// What evaluate() accumulates over the positions.
struct Totals {
  double nll = 0;
  double base_nll = 0;
  size_t top1 = 0;
  std::vector<double> kl;
};

void score_window(const std::vector<int32_t>& tokens, const std::vector<float>& logits, size_t n_vocab,
                  BaseWriter* writer, BaseReader* reader, Totals* t) {
  std::vector<double> lq;
  BaseRow base;
  const bool want_lq = writer || reader;
  for (size_t r = 0; r + 1 < tokens.size(); ++r) {
    const RowStats s = row_stats(logits.data() + r * n_vocab, n_vocab, tokens[r + 1], want_lq ? &lq : nullptr);
    t->nll += s.nll;
    if (writer) writer->add(s, lq);
    if (!reader) continue;
    reader->next(&base);
    t->base_nll += base.nll;
    t->top1 += base.argmax == s.argmax;
    t->kl.push_back(kl_divergence(base, lq));
  }
}

}  // namespace

Report evaluate(const std::vector<int32_t>& ids, size_t n_vocab, const Options& o, const WindowLogits& logits) {
  check_ids(ids, n_vocab);
  const std::vector<Window> windows = cut_windows(ids.size(), o.ctx);
  Report r;
  r.n_windows = windows.size();
  r.ctx = o.ctx ? o.ctx : ids.size();
  r.n_positions = predicted_positions(windows);
  if (r.n_positions == 0) throw PplError("no position to predict: every window holds one token (give --ctx >= 2)");
  const BaseHeader header = base_header_for(ids, n_vocab, o.ctx);
  std::unique_ptr<BaseReader> reader = o.kl_base.empty() ? nullptr : std::make_unique<BaseReader>(o.kl_base, header);
  std::unique_ptr<BaseWriter> writer =
      o.save_base.empty() ? nullptr : std::make_unique<BaseWriter>(o.save_base, header);
  Totals t;
  std::vector<float> rows;
  for (size_t w = 0; w < windows.size(); ++w) {
    const auto first = ids.begin() + static_cast<std::ptrdiff_t>(windows[w].begin);
    const std::vector<int32_t> tokens(first, first + static_cast<std::ptrdiff_t>(windows[w].n_tokens));
    if (tokens.size() < 2) continue;  // a last window of one token predicts nothing
    logits(w, tokens, &rows);
    if (rows.size() != (tokens.size() - 1) * n_vocab)
      throw PplError("window " + std::to_string(w) + ": got " + std::to_string(rows.size()) + " logits, expected " +
                     std::to_string((tokens.size() - 1) * n_vocab));
    score_window(tokens, rows, n_vocab, writer.get(), reader.get(), &t);
  }
  if (writer) writer->finish();
  const double n = static_cast<double>(r.n_positions);
  r.ppl = std::exp(t.nll / n);
  if (reader) {
    r.has_kl = true;
    r.base_ppl = std::exp(t.base_nll / n);
    double sum = 0;
    for (const double k : t.kl) sum += k;
    r.kl_mean = sum / n;
    r.kl_p99 = percentile(t.kl, 0.99);
    r.kl_max = *std::max_element(t.kl.begin(), t.kl.end());
    r.top1_pct = 100.0 * static_cast<double>(t.top1) / n;
  }
  return r;
}

namespace {

// A JSON number, or null for inf / NaN (a diverging run stays valid JSON).
std::string number(double v, const char* format) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  const int n = std::snprintf(b, sizeof(b), format, v);
  return std::string(b, static_cast<size_t>(n));
}

}  // namespace

std::string report_json(const Report& r) {
  std::string s = "{\"ppl\": " + number(r.ppl, "%.17g") + ", \"n_positions\": " + std::to_string(r.n_positions) +
                  ", \"n_windows\": " + std::to_string(r.n_windows) + ", \"ctx\": " + std::to_string(r.ctx);
  if (!r.type_k.empty()) s += ", \"type_k\": \"" + r.type_k + "\", \"type_v\": \"" + r.type_v + "\"";
  if (r.has_kl) {
    s += ", \"base_ppl\": " + number(r.base_ppl, "%.17g") + ", \"delta_ppl\": " + number(r.ppl - r.base_ppl, "%.17g") +
         ", \"kl_mean\": " + number(r.kl_mean, "%.9g") + ", \"kl_p99\": " + number(r.kl_p99, "%.9g") +
         ", \"kl_max\": " + number(r.kl_max, "%.9g") + ", \"top1_pct\": " + number(r.top1_pct, "%.6f");
  }
  return s + "}";
}

namespace {

int32_t parse_id(const std::string& item, size_t index) {
  const bool digits = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
  errno = 0;
  const unsigned long long v = digits ? std::strtoull(item.c_str(), nullptr, 10) : 0;
  if (!digits || errno == ERANGE || v > static_cast<unsigned long long>(std::numeric_limits<int32_t>::max()))
    throw PplError("the ids file holds '" + item + "' (item " + std::to_string(index) +
                   "), not a token id (a non-negative integer)");
  return static_cast<int32_t>(v);
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

}  // namespace

std::vector<int32_t> parse_ids(const std::string& text) {
  const std::string body = trim(text);
  std::vector<int32_t> ids;
  if (!body.empty() && body.front() == '[') {
    if (body.back() != ']') throw PplError("the ids file starts a JSON array '[' but does not end it with ']'");
    const std::string inner = trim(body.substr(1, body.size() - 2));
    std::istringstream in(inner);
    for (std::string item; !inner.empty() && std::getline(in, item, ',');)
      ids.push_back(parse_id(trim(item), ids.size()));
    if (!inner.empty() && inner.back() == ',') throw PplError("the ids file's JSON array ends with a comma");
  } else {
    std::istringstream in(body);
    for (std::string item; in >> item;) ids.push_back(parse_id(item, ids.size()));
  }
  if (ids.empty()) throw PplError("the ids file holds no token ids");
  return ids;
}

}  // namespace ds::ppl
