#include "coordinator/openai/embedding_request.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "coordinator/http/api_error.h"
#include "coordinator/openai/json_fields.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds::openai {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// Any JSON integer (the range is checked by the caller, so its message can name the limits).
std::optional<int64_t> get_integer(const rapidjson::Value& req, const char* name) {
  const rapidjson::Value* v = field(req, name);
  if (v == nullptr) return std::nullopt;
  if (!v->IsInt64()) bad(name, std::string("'") + name + "' must be an integer");
  return v->GetInt64();
}

std::string entry(const std::string& param, size_t i) {
  return param + "[" + std::to_string(i) + "]";
}

// ---- input -------------------------------------------------------------------------------------

enum class EntryKind { kString, kTokenId, kTokenArray, kOther };

EntryKind kind_of(const rapidjson::Value& v) {
  if (v.IsString()) return EntryKind::kString;
  if (v.IsNumber()) return EntryKind::kTokenId;
  if (v.IsArray()) return EntryKind::kTokenArray;
  return EntryKind::kOther;
}

const char* kind_name(EntryKind k) {
  switch (k) {
    case EntryKind::kString:
      return "a string";
    case EntryKind::kTokenId:
      return "a token id";
    case EntryKind::kTokenArray:
      return "an array of token ids";
    case EntryKind::kOther:
      break;
  }
  return "neither a string nor a token id";
}

// `arr` (named `where` in messages): a non-empty array of ids in [0, n_vocab).
std::vector<int32_t> read_ids(const rapidjson::Value& arr, const std::string& param, const std::string& where,
                              int32_t n_vocab) {
  if (arr.Empty()) bad(param, "'" + where + "' must not be an empty array");
  std::vector<int32_t> ids;
  ids.reserve(arr.Size());
  for (rapidjson::SizeType i = 0; i < arr.Size(); ++i) {
    const rapidjson::Value& v = arr[i];
    if (!v.IsInt64()) bad(param, entry(where, i) + " must be an integer token id");
    const int64_t id = v.GetInt64();
    if (id < 0 || id >= n_vocab) {
      bad(param, entry(where, i) + " = " + std::to_string(id) + " is not a token id (the vocabulary has " +
                     std::to_string(n_vocab) + " tokens)");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// The kind of the first entry decides; every other entry must match it (OpenAI's four shapes).
std::vector<EmbeddingInput> read_input_array(const rapidjson::Value& arr, const std::string& param,
                                             const EmbeddingModel& model) {
  if (arr.Empty()) bad(param, "'" + param + "' must not be an empty array");
  const EntryKind kind = kind_of(arr[0]);
  if (kind == EntryKind::kOther) {
    bad(param, entry(param, 0) + " must be a string, a token id or an array of token ids");
  }
  for (rapidjson::SizeType i = 1; i < arr.Size(); ++i) {
    if (kind_of(arr[i]) != kind) {
      bad(param, "'" + param + "' mixes types: " + entry(param, 0) + " is " + kind_name(kind) + ", " + entry(param, i) +
                     " is " + kind_name(kind_of(arr[i])));
    }
  }
  if (kind == EntryKind::kTokenId) return {EmbeddingInput{std::nullopt, read_ids(arr, param, param, model.n_vocab)}};
  if (arr.Size() > model.max_inputs) {
    bad(param, "'" + param + "' holds " + std::to_string(arr.Size()) + " inputs, at most " +
                   std::to_string(model.max_inputs) + " are allowed");
  }
  std::vector<EmbeddingInput> inputs;
  inputs.reserve(arr.Size());
  for (rapidjson::SizeType i = 0; i < arr.Size(); ++i) {
    if (kind == EntryKind::kTokenArray) {
      inputs.push_back({std::nullopt, read_ids(arr[i], param, entry(param, i), model.n_vocab)});
      continue;
    }
    if (arr[i].GetStringLength() == 0) bad(param, entry(param, i) + " must not be an empty string");
    inputs.push_back({to_string(arr[i]), {}});
  }
  return inputs;
}

// `input`, or llama-server's `content` when `input` is absent.
void parse_inputs(const rapidjson::Value& req, const EmbeddingModel& model, EmbeddingParams& p) {
  const rapidjson::Value* v = field(req, "input");
  if (v == nullptr && (v = field(req, "content")) != nullptr) p.input_param = "content";
  const std::string& param = p.input_param;
  if (v == nullptr) bad(param, "'input' is required");
  if (v->IsString()) {
    if (v->GetStringLength() == 0) bad(param, "'" + param + "' must not be an empty string");
    p.inputs.push_back({to_string(*v), {}});
    return;
  }
  if (!v->IsArray()) {
    bad(param,
        "'" + param + "' must be a string, an array of strings, an array of token ids or an array of token-id arrays");
  }
  p.inputs = read_input_array(*v, param, model);
}

// ---- the other fields ----------------------------------------------------------------------------

void parse_output_options(const rapidjson::Value& req, const EmbeddingModel& model, EmbeddingParams& p) {
  if (const auto f = get_string(req, "encoding_format")) {
    if (*f == "base64") {
      p.encoding = EmbeddingEncoding::kBase64;
    } else if (*f != "float") {
      bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\", got \"" + *f + "\"");
    }
  }
  if (const auto d = get_integer(req, "dimensions")) {
    if (*d < 1 || *d > static_cast<int64_t>(model.native_dim)) {
      bad("dimensions", "'dimensions' must be between 1 and " + std::to_string(model.native_dim) +
                            " (the model's embedding size), got " + std::to_string(*d));
    }
    p.dimensions = static_cast<uint32_t>(*d);
  }
  // llama-server's embd_normalize: 2 = L2, -1 = none (its other p-norms are not offered).
  if (const auto e = get_integer(req, "embd_normalize")) {
    if (*e != 2 && *e != -1) {
      bad("embd_normalize", "'embd_normalize' must be 2 (L2) or -1 (none), got " + std::to_string(*e));
    }
    p.normalize = *e == 2;
  }
  p.normalize = get_bool(req, "normalize").value_or(p.normalize);
}

void parse_truncation(const rapidjson::Value& req, const EmbeddingModel& model, EmbeddingParams& p) {
  const auto t = get_integer(req, "truncate_prompt_tokens");
  if (!t) return;
  if (*t == -1) {
    p.truncate_tokens = model.context;
  } else if (*t >= 1 && *t <= static_cast<int64_t>(model.context)) {
    p.truncate_tokens = static_cast<size_t>(*t);
  } else {
    bad("truncate_prompt_tokens", "'truncate_prompt_tokens' must be -1 (the context) or between 1 and " +
                                      std::to_string(model.context) + " (the model's context), got " +
                                      std::to_string(*t));
  }
}

}  // namespace

EmbeddingParams parse_embedding_params(const rapidjson::Value& req, const EmbeddingModel& model) {
  EmbeddingParams p;
  p.model = get_string(req, "model").value_or("");
  (void)get_string(req, "user");  // checked for type, otherwise ignored
  parse_inputs(req, model, p);
  parse_output_options(req, model, p);
  parse_truncation(req, model, p);
  return p;
}

std::optional<int32_t> embedding_eos_id(const Tokenizer& tok, bool qwen3_embedding) {
  if (!qwen3_embedding && !tok.add_eos()) return std::nullopt;
  if (const auto id = tok.find_token("<|endoftext|>")) return *id;
  if (tok.eos_id() >= 0) return tok.eos_id();
  return std::nullopt;
}

// ---- tokenization --------------------------------------------------------------------------------

namespace {

// The tokens of one input before its end token: the last `keep` when truncating, else all of
// them within `budget` (TokenBudgetExceeded beyond it).
std::vector<int32_t> input_tokens(const EmbeddingInput& in, const Tokenizer& tok, std::optional<size_t> keep,
                                  size_t budget) {
  if (keep && *keep == 0) return {};
  std::vector<int32_t> ids;
  if (!in.text) {
    ids = in.ids;
  } else if (keep) {
    ids = tok.encode(trailing_text_for_tokens(*in.text, *keep, tok.max_token_bytes()), /*parse_control=*/false);
  } else {
    ids = tok.encode(*in.text, /*parse_control=*/false, budget);
  }
  if (keep && ids.size() > *keep) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(*keep));
  return ids;
}

[[noreturn]] void too_long(const std::string& param, size_t i, size_t n, bool at_least, size_t context) {
  bad(param, entry(param, i) + " has " + (at_least ? "at least " : "") + std::to_string(n) +
                 " tokens, the model's context is " + std::to_string(context));
}

[[noreturn]] void too_many(const std::string& param, size_t n, bool at_least, size_t max) {
  bad(param, std::string("the inputs have ") + (at_least ? "at least " : "") + std::to_string(n) +
                 " tokens together, at most " + std::to_string(max) + " are allowed per request");
}

}  // namespace

EmbeddingBatch tokenize_embedding_inputs(const EmbeddingParams& p, const Tokenizer& tok, std::optional<int32_t> eos,
                                         const EmbeddingModel& model) {
  EmbeddingBatch batch;
  batch.ids.reserve(p.inputs.size());
  const size_t max_total = model.max_request_tokens;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const EmbeddingInput& in = p.inputs[i];
    // Token-id inputs that already end with the end token keep it as their one end token.
    const bool has_eos = eos && !in.text && !in.ids.empty() && in.ids.back() == *eos;
    const size_t extra = eos && !has_eos ? 1 : 0;
    std::optional<size_t> keep;
    if (p.truncate_tokens) keep = *p.truncate_tokens - std::min(extra, *p.truncate_tokens);
    const size_t left = max_total - std::min(max_total, batch.total_tokens);
    std::vector<int32_t> ids;
    try {
      ids = input_tokens(in, tok, keep, left - std::min(left, extra));
    } catch (const TokenBudgetExceeded& e) {
      const size_t n = e.at_least() + extra;
      if (n > model.context) too_long(p.input_param, i, n, true, model.context);
      too_many(p.input_param, batch.total_tokens + n, true, max_total);
    }
    if (extra != 0) ids.push_back(*eos);
    if (ids.size() > model.context) too_long(p.input_param, i, ids.size(), false, model.context);
    if (batch.total_tokens + ids.size() > max_total) {
      too_many(p.input_param, batch.total_tokens + ids.size(), false, max_total);
    }
    batch.total_tokens += ids.size();
    batch.ids.push_back(std::move(ids));
  }
  return batch;
}

// ---- output --------------------------------------------------------------------------------------

std::vector<float> finish_embedding(std::span<const float> pooled, std::optional<uint32_t> dimensions, bool normalize) {
  const size_t n = dimensions.value_or(static_cast<uint32_t>(pooled.size()));
  if (n > pooled.size()) {
    throw std::invalid_argument("dimensions " + std::to_string(n) + " exceed the pooled size " +
                                std::to_string(pooled.size()));
  }
  std::vector<float> out(pooled.begin(), pooled.begin() + static_cast<std::ptrdiff_t>(n));
  if (!normalize) return out;
  double sum = 0.0;
  for (const float v : out) sum += static_cast<double>(v) * v;
  if (sum > 0.0) {
    const double inv = 1.0 / std::sqrt(sum);
    for (float& v : out) v = static_cast<float>(v * inv);
  }
  return out;
}

std::string base64_f32(std::span<const float> values) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  bytes.reserve(values.size() * 4);
  for (const float v : values) {
    const auto u = std::bit_cast<uint32_t>(v);
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>((u >> (8 * b)) & 0xFF));  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (size_t k = 0; k < 3; ++k) {
      group = (group << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0U);
    }
    for (size_t k = 0; k < 4; ++k) out.push_back(k <= n ? kAlphabet[(group >> (18 - 6 * k)) & 0x3F] : '=');
  }
  return out;
}

void write_f32(JsonWriter& w, float v) {
  if (!std::isfinite(v)) {
    w.Null();
    return;
  }
  char buf[32];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round trip
  w.RawValue(buf, static_cast<size_t>(r.ptr - buf), rapidjson::kNumberType);
}

std::string embedding_response_json(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                                    EmbeddingEncoding encoding, size_t prompt_tokens) {
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  w.Key("object");
  w.String("list");
  w.Key("data");
  w.StartArray();
  for (size_t i = 0; i < embeddings.size(); ++i) {
    w.StartObject();
    w.Key("object");
    w.String("embedding");
    w.Key("index");
    w.Uint64(i);
    w.Key("embedding");
    if (encoding == EmbeddingEncoding::kBase64) {
      const std::string b64 = base64_f32(embeddings[i]);
      w.String(b64.data(), static_cast<rapidjson::SizeType>(b64.size()));
    } else {
      w.StartArray();
      for (const float v : embeddings[i]) write_f32(w, v);
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("model");
  w.String(model.data(), static_cast<rapidjson::SizeType>(model.size()));
  w.Key("usage");
  w.StartObject();
  w.Key("prompt_tokens");
  w.Uint64(prompt_tokens);
  w.Key("total_tokens");
  w.Uint64(prompt_tokens);
  w.EndObject();
  w.EndObject();
  return {sb.GetString(), sb.GetSize()};
}

// ---- text cuts -----------------------------------------------------------------------------------

namespace {

constexpr size_t kCutSearchBytes = 64 << 10;

bool is_ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A space followed by an ASCII letter starts a pre-token ("[^\r\n\p{L}\p{N}]?\p{L}+") whatever
// precedes it, and neither byte composes under NFC.
bool is_cut_point(std::string_view text, size_t p) {
  return p + 1 < text.size() && text[p] == ' ' && is_ascii_letter(text[p + 1]);
}

bool is_char_start(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
}

// Bytes that surely hold `n_tokens` tokens (one spare: NFC may lengthen a few characters).
size_t span_bytes(size_t n_tokens, size_t max_token_bytes) {
  const size_t per = std::max<size_t>(1, max_token_bytes);
  if (n_tokens >= std::numeric_limits<size_t>::max() / per - 1) return std::numeric_limits<size_t>::max();
  return (n_tokens + 1) * per;
}

}  // namespace

std::string_view leading_text_for_tokens(std::string_view text, size_t n_tokens, size_t max_token_bytes) {
  const size_t need = span_bytes(n_tokens, max_token_bytes);
  if (text.size() <= need) return text;
  const size_t limit = std::min(text.size(), need + kCutSearchBytes);
  for (size_t p = need; p < limit; ++p) {
    if (is_cut_point(text, p)) return text.substr(0, p);
  }
  size_t p = need;
  while (p < text.size() && !is_char_start(text[p])) ++p;
  return text.substr(0, p);
}

std::string_view trailing_text_for_tokens(std::string_view text, size_t n_tokens, size_t max_token_bytes) {
  const size_t need = span_bytes(n_tokens, max_token_bytes);
  if (text.size() <= need) return text;
  const size_t start = text.size() - need;  // the cut lies at or before this
  const size_t floor = start - std::min(start, kCutSearchBytes);
  for (size_t p = start + 1; p-- > floor;) {
    if (is_cut_point(text, p)) return text.substr(p);
  }
  size_t p = start;
  while (p > 0 && !is_char_start(text[p])) --p;
  return text.substr(p);
}

}  // namespace ds::openai
