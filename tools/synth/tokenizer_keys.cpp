#include "tools/synth/tokenizer_keys.h"

#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "common/gguf.h"
#include "coordinator/tokenizer/byte_level.h"
#include "coordinator/tokenizer/vocab.h"

namespace ds::synth {
namespace {

constexpr const char* kTokensKey = "tokenizer.ggml.tokens";
constexpr const char* kTypesKey = "tokenizer.ggml.token_type";
constexpr const char* kScoresKey = "tokenizer.ggml.scores";

int32_t type_code(TokenType t) {
  return static_cast<int32_t>(t);
}

// The token table padded to n_vocab: texts (views into `pad_names` for the padding) and types.
struct PaddedTable {
  std::vector<std::string_view> texts;
  std::vector<int32_t> types;
  std::vector<std::string> pad_names;  // owns the "[PAD<i>]" texts
};

PaddedTable pad_table(const std::vector<std::string_view>& tokens, std::vector<int32_t> types, uint32_t n_vocab) {
  PaddedTable t;
  t.pad_names.reserve(n_vocab - tokens.size());
  for (size_t i = tokens.size(); i < n_vocab; ++i) t.pad_names.push_back(pad_token_text(static_cast<uint32_t>(i)));
  // llama.cpp refuses a vocabulary with a duplicate text: a source token named like one of
  // our padding tokens would make the file unloadable there.
  const std::unordered_set<std::string_view> names(t.pad_names.begin(), t.pad_names.end());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (names.count(tokens[i]) != 0) {
      throw ConfigError("source token " + std::to_string(i) + " '" + std::string(tokens[i]) +
                        "' has the text of a padding token; cannot pad this vocabulary");
    }
  }
  t.texts = tokens;
  t.texts.insert(t.texts.end(), t.pad_names.begin(), t.pad_names.end());
  t.types = std::move(types);
  t.types.resize(n_vocab, type_code(TokenType::UNUSED));
  return t;
}

// The source's token types, NORMAL for every token when the file has none.
std::vector<int32_t> source_types(const GgufFile& source, size_t n_tokens) {
  if (!source.has(kTypesKey)) return std::vector<int32_t>(n_tokens, type_code(TokenType::NORMAL));
  const std::vector<int64_t> raw = source.get_int_array(kTypesKey);
  if (raw.size() != n_tokens) {
    throw ConfigError(std::string(kTypesKey) + " has " + std::to_string(raw.size()) + " entries but " + kTokensKey +
                      " has " + std::to_string(n_tokens));
  }
  return {raw.begin(), raw.end()};
}

void check_source(const GgufFile& source, uint32_t n_vocab) {
  if (!source.has(kTokensKey) || !source.has("tokenizer.ggml.model")) {
    throw ConfigError("'" + source.source() + "' has no tokenizer (" + kTokensKey + " / tokenizer.ggml.model missing)");
  }
  // Qwen3.5 models use byte-level BPE, the only kind deltaserve serves.
  const std::string model = source.get_string("tokenizer.ggml.model");
  if (model != "gpt2" || !source.has("tokenizer.ggml.merges")) {
    throw ConfigError("'" + source.source() + "': tokenizer.ggml.model '" + model +
                      "' is not a byte-level BPE tokenizer with merges (expected 'gpt2')");
  }
  const size_t n = source.get_string_array(kTokensKey).size();
  if (n == 0) throw ConfigError("'" + source.source() + "': " + kTokensKey + " is empty");
  if (n > n_vocab) {
    throw ConfigError("'" + source.source() + "' has " + std::to_string(n) +
                      " tokens, more than the model's vocabulary of " + std::to_string(n_vocab) +
                      " (choose a larger --vocab)");
  }
}

// Per-token float scores (SentencePiece files; Qwen's have none): padded with 0 like the table.
void add_padded_scores(GgufStreamWriter& w, const GgufValue& v, uint32_t n_vocab) {
  if (!v.is_array() || v.elem_type != GgufType::FLOAT32) {
    throw ConfigError(std::string(kScoresKey) + " is " + v.type_string() + ", expected array<float32>");
  }
  std::vector<float> scores(n_vocab, 0.0f);
  for (uint64_t i = 0; i < v.count && i < n_vocab; ++i) scores[i] = static_cast<float>(gguf_array_f64(v, i));
  w.add_f32_array(kScoresKey, scores);
}

}  // namespace

std::string pad_token_text(uint32_t id) {
  return "[PAD" + std::to_string(id) + "]";
}

std::string builtin_filler_text(uint32_t id) {
  return "\xc4\xa0tok" + std::to_string(id);
}  // "Ġtok<id>"

void add_tokenizer_from(GgufStreamWriter& w, const GgufFile& source, uint32_t n_vocab) {
  check_source(source, n_vocab);
  const std::vector<std::string_view>& tokens = source.get_string_array(kTokensKey);
  const PaddedTable table = pad_table(tokens, source_types(source, tokens.size()), n_vocab);
  for (const auto& [key, value] : source.metadata()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    if (key == kTokensKey) {
      w.add_string_array(key, table.texts);
      if (!source.has(kTypesKey)) w.add_i32_array(kTypesKey, table.types);  // the padding must be typed UNUSED
    } else if (key == kTypesKey) {
      w.add_i32_array(key, table.types);
    } else if (key == kScoresKey) {
      add_padded_scores(w, value, n_vocab);
    } else {
      w.add_value(key, value);
    }
  }
}

void add_builtin_tokenizer(GgufStreamWriter& w, uint32_t n_vocab) {
  if (n_vocab < kBuiltinTokens) {
    throw ConfigError("vocabulary of " + std::to_string(n_vocab) + " is too small for the built-in tokenizer (needs " +
                      std::to_string(kBuiltinTokens) + "); use --tokenizer-from or a larger --vocab");
  }
  std::vector<std::string> tokens;  // owns the filler texts
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(tok::byte_to_mapped_utf8(static_cast<uint8_t>(b)));
    types.push_back(type_code(TokenType::NORMAL));
  }
  const uint32_t endoftext = 256, im_end = 258;
  for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.emplace_back(t);
    types.push_back(type_code(TokenType::CONTROL));
  }
  for (const char* t : {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"}) {
    tokens.emplace_back(t);
    types.push_back(type_code(TokenType::USER_DEFINED));
  }
  // The vision markers the Qwen3.5 template renders an image as (CONTROL, as in the real
  // vocabulary), so the file serves with a synthetic mmproj (ModelConfig::image_token_id).
  for (const char* t : {"<|vision_start|>", "<|vision_end|>", "<|image_pad|>"}) {
    tokens.emplace_back(t);
    types.push_back(type_code(TokenType::CONTROL));
  }
  // The rest are visible filler words, not UNUSED padding: a random-weight model samples ids
  // uniformly-ish, and hidden tokens would make most of its output empty text (no SSE events,
  // so serving benchmarks could not time tokens). No merge produces them, so encoding never does.
  for (uint32_t id = kBuiltinTokens; id < n_vocab; ++id) {
    tokens.push_back(builtin_filler_text(id));
    types.push_back(type_code(TokenType::NORMAL));
  }
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "qwen35");
  w.add_string_array(kTokensKey, std::vector<std::string_view>(tokens.begin(), tokens.end()));
  w.add_i32_array(kTypesKey, types);
  w.add_string_array("tokenizer.ggml.merges", {});
  w.add_u32("tokenizer.ggml.eos_token_id", im_end);
  w.add_u32("tokenizer.ggml.padding_token_id", endoftext);
  w.add_bool("tokenizer.ggml.add_bos_token", false);
}

}  // namespace ds::synth
