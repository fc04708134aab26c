// deltaserve-bench-grammar --maskbench PATH --model GGUF [--vocab-size N] [--extend-vocab N] [--limit K]
//                          [--compile-only] [--verbose]
//
// Runs every MaskBench record ({description, schema, tests:[{description, valid, data}]}) from
// PATH (a .tar.xz, extracted with `tar -xJf` into a temporary directory, or a directory of
// .json files) on one thread: compiles each schema (compile time), and for every test instance
// serialized compactly and with ", " / ": " separators, tokenized with the model's tokenizer,
// walks the tokens through a Matcher. At every position of a valid instance it times
// fill_mask and checks that the mask bit agrees with accept_token. Prints compile and mask
// percentiles, schemas accepted / total (with refusal keywords), and instance verdicts.
// --vocab-size N pads the vocabulary with empty (never allowed) tokens up to N ids.
// --compile-only skips the instances (compile time and acceptance only).
// --extend-vocab N adds non-empty tokens up to N ids, each the concatenation of two tokenizer
// tokens (how BPE vocabularies grow): a larger trie with realistic byte statistics, never
// produced by the tokenizer.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "coordinator/structured/json_schema_compiler.h"
#include "coordinator/structured/json_text.h"
#include "coordinator/structured/matcher.h"
#include "coordinator/structured/token_trie.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "tools/cli_args.h"

namespace fs = std::filesystem;
using namespace ds::structured;

namespace {

const ds::cli::Usage kUsage{
    "deltaserve-bench-grammar",
    "--maskbench PATH(.tar.xz|dir) --model GGUF [--vocab-size N] [--extend-vocab N] [--limit K] [--compile-only] "
    "[--shard I/N] [--times FILE] [--max-ws N] [--verbose]\n"
    "  --shard I/N: only the schemas whose index is I modulo N (run N processes side by side);\n"
    "  --max-ws N: the grammar's whitespace run limit (default 8; 0 = compact JSON only)\n"
    "  --times FILE: also write every compile and mask time and the counts there, for\n"
    "  tools/merge_grammar_shards.py to add the shards up"};

double now_us() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::micro>(clock::now().time_since_epoch()).count();
}

double pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

double avg(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

std::vector<fs::path> record_files(const std::string& path, std::string& tmpdir) {
  fs::path dir = path;
  if (fs::is_regular_file(path)) {
    char tmpl[] = "/tmp/maskbench-XXXXXX";
    if (!mkdtemp(tmpl)) kUsage.fail("cannot create a temporary directory");
    tmpdir = tmpl;
    const std::string cmd = "tar -xJf '" + path + "' -C '" + tmpdir + "'";
    if (std::system(cmd.c_str()) != 0) kUsage.fail("cannot extract " + path);
    dir = tmpdir;
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

struct Stats {
  std::vector<double> compile_us, mask_us;
  size_t schemas = 0, accepted = 0, right = 0, wrong = 0, mask_mismatch = 0, tokens = 0;
  std::map<std::string, size_t> refused;
};

// Returns whether the instance ends accepted; times masks when `timed`.
bool run_instance(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenVocab>& v,
                  const std::vector<int32_t>& ids, bool timed, Stats& st, std::vector<uint32_t>& mask,
                  size_t& consumed) {
  Matcher m(g, v);
  consumed = 0;
  for (int32_t id : ids) {
    consumed += v->token_bytes(id).size();
    if (timed) {
      const double t0 = now_us();
      m.fill_mask(mask.data());
      st.mask_us.push_back(now_us() - t0);
      ++st.tokens;
      const bool bit = (mask[id >> 5] >> (id & 31)) & 1;
      const bool ok = m.accept_token(id);
      if (bit != ok) ++st.mask_mismatch;
      if (!ok) return false;
    } else if (!m.accept_token(id)) {
      return false;
    }
  }
  if (timed) {
    const double t0 = now_us();
    m.fill_mask(mask.data());
    st.mask_us.push_back(now_us() - t0);
  }
  return m.accepting();
}

// Raw figures of this run, one per line ("c" compile us, "m" mask us, then the counts), so
// shards run side by side add up to exactly the figures one run over all schemas gives.
void write_times(const std::string& path, const Stats& st) {
  std::ofstream out(path);
  for (double t : st.compile_us) out << "c " << t << "\n";
  for (double t : st.mask_us) out << "m " << t << "\n";
  out << "n schemas " << st.schemas << "\nn accepted " << st.accepted << "\nn right " << st.right << "\nn wrong "
      << st.wrong << "\nn mismatch " << st.mask_mismatch << "\n";
  for (const auto& [k, n] : st.refused) out << "r " << k << " " << n << "\n";
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  std::string maskbench, model;
  size_t vocab_size = 0, extend = 0, limit = SIZE_MAX, shard = 0, n_shards = 1;
  uint32_t max_ws = GrammarOptions{}.max_ws;
  std::string times_path;
  bool verbose = false, compile_only = false;
  ds::cli::ArgReader args(kUsage, argc, argv);
  for (std::string a; args.next(a);) {
    if (a == "--maskbench")
      maskbench = args.value();
    else if (a == "--model")
      model = args.value();
    else if (a == "--vocab-size")
      vocab_size = ds::cli::parse_number<size_t>(kUsage, a, args.value(), 1);
    else if (a == "--extend-vocab")
      extend = ds::cli::parse_number<size_t>(kUsage, a, args.value(), 1);
    else if (a == "--limit")
      limit = ds::cli::parse_number<size_t>(kUsage, a, args.value(), 1);
    else if (a == "--max-ws")
      max_ws = ds::cli::parse_number<uint32_t>(kUsage, a, args.value(), 0);
    else if (a == "--compile-only")
      compile_only = true;
    else if (a == "--verbose")
      verbose = true;
    else if (a == "--times")
      times_path = args.value();
    else if (a == "--shard") {
      const std::string v = args.value();
      const size_t slash = v.find('/');
      if (slash == std::string::npos) kUsage.fail("--shard takes I/N");
      shard = ds::cli::parse_number<size_t>(kUsage, a, v.substr(0, slash), 0);
      n_shards = ds::cli::parse_number<size_t>(kUsage, a, v.substr(slash + 1), 1);
      if (shard >= n_shards) kUsage.fail("--shard I/N needs I < N");
    } else
      args.unknown();
  }
  if (maskbench.empty() || model.empty()) kUsage.fail("--maskbench and --model are required");
  try {
    const ds::Tokenizer tok(ds::GgufFile::open(model));
    TokenVocab base = from_tokenizer(tok);
    std::vector<std::string> bytes;
    for (int32_t i = 0; i < base.n_vocab(); ++i) bytes.push_back(base.token_bytes(i));
    const size_t n_base = bytes.size();
    for (size_t id = n_base; id < extend; ++id) {
      const std::string& x = bytes[(id * 2654435761u) % n_base];
      const std::string& y = bytes[(id * 40503u + 7) % n_base];
      bytes.push_back(x.empty() || y.empty() ? std::string("x") + y : x + y);
    }
    if (vocab_size > bytes.size()) bytes.resize(vocab_size);
    auto vocab = std::make_shared<const TokenVocab>(std::move(bytes), tok.eog_ids());
    std::printf("vocabulary: %d tokens (%d in the tokenizer), trie %zu nodes\n", vocab->n_vocab(), tok.n_vocab(),
                vocab->nodes().size());
    std::string tmpdir;
    const auto files = record_files(maskbench, tmpdir);
    Stats st;
    std::vector<uint32_t> mask(vocab->n_words());
    size_t index = 0;
    for (const auto& f : files) {
      if (st.schemas >= limit) break;
      if (index++ % n_shards != shard) continue;
      std::ifstream in(f);
      std::stringstream ss;
      ss << in.rdbuf();
      rapidjson::Document d;
      d.Parse(ss.str().c_str());
      if (d.HasParseError() || !d.IsObject() || !d.HasMember("schema")) continue;
      ++st.schemas;
      std::shared_ptr<const Grammar> g;
      const double t0 = now_us();
      try {
        GrammarOptions opt;
        opt.max_ws = max_ws;
        g = compile_json_schema(d["schema"], opt);
      } catch (const SchemaError& e) {
        ++st.refused[e.keyword];
        if (verbose) std::printf("refused %s: %s\n", f.filename().c_str(), e.what());
        continue;
      }
      st.compile_us.push_back(now_us() - t0);
      if (verbose)
        std::printf("compiled %s in %.0f us, %zu states\n", f.filename().c_str(), st.compile_us.back(), g->n_states());
      ++st.accepted;
      if (compile_only) continue;
      for (const auto& t : d["tests"].GetArray()) {
        const bool valid = t["valid"].GetBool();
        for (bool spaced : {false, true}) {
          const std::string text = json_text(t["data"], spaced);
          size_t consumed = 0;
          const bool ok = run_instance(g, vocab, tok.encode(text, false), valid, st, mask, consumed);
          if (ok == valid) {
            ++st.right;
          } else {
            ++st.wrong;
            if (verbose)
              std::printf("WRONG %s (%s) at byte %zu: ...%s\n", f.filename().c_str(), valid ? "valid" : "invalid",
                          consumed, text.substr(consumed > 80 ? consumed - 80 : 0, 100).c_str());
          }
        }
      }
    }
    if (!tmpdir.empty()) fs::remove_all(tmpdir);
    std::printf("schemas: %zu accepted / %zu total (%.1f%%)\n", st.accepted, st.schemas,
                100.0 * static_cast<double>(st.accepted) / static_cast<double>(std::max<size_t>(st.schemas, 1)));
    std::printf("refused by keyword:");
    for (const auto& [k, n] : st.refused) std::printf(" %s=%zu", k.c_str(), n);
    std::printf("\ninstance verdicts (compact + spaced serializations): %zu right, %zu wrong\n", st.right, st.wrong);
    std::printf("mask/accept disagreements: %zu\n", st.mask_mismatch);
    std::printf("compile us: avg %.0f p50 %.0f p99 %.0f max %.0f\n", avg(st.compile_us), pct(st.compile_us, 50),
                pct(st.compile_us, 99), pct(st.compile_us, 100));
    std::printf("mask us (%zu masks): avg %.1f p50 %.1f p99 %.1f p99.9 %.1f max %.1f\n", st.mask_us.size(),
                avg(st.mask_us), pct(st.mask_us, 50), pct(st.mask_us, 99), pct(st.mask_us, 99.9), pct(st.mask_us, 100));
    if (!times_path.empty()) write_times(times_path, st);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-bench-grammar: %s\n", e.what());
    return 1;
  }
  return 0;
}
