// POST /v1/embeddings at the request layer: the body's fields, tokenization of the inputs, the
// post-processing of a pooled vector and the response body. Pure functions: no engine, no HTTP.
//
// Request fields (unknown ones are ignored, as vLLM does):
//   input (or llama-server's `content`): a string | an array of strings | an array of token ids |
//     an array of arrays of token ids; never empty, at most EmbeddingModel::max_inputs entries.
//   encoding_format: "float" (default) | "base64" (little-endian float32 bytes).
//   dimensions: 1..native size; the first N values, re-normalised (Matryoshka models). The native
//     size is accepted for every model, since clients send it unasked.
//   normalize (vLLM, default true) / embd_normalize (llama-server: 2 = L2, -1 = none).
//   truncate_prompt_tokens (vLLM): keep the last N tokens of each input (-1: the context).
//   model, user: strings; `user` is ignored.
//
// End-of-sequence rule (embedding_eos_id): last-token pooling reads the hidden state of the
// `<|endoftext|>` token the model was trained with (Qwen3-Embedding appends 151643, not the
// tokenizer's eos <|im_end|>), so every input gets exactly one: text is tokenized as literal
// text (it can never produce that control token), then the id is appended; a token-id input
// that already ends with it is left as is.
#pragma once

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds {
class Tokenizer;
}  // namespace ds

namespace ds::openai {

inline constexpr size_t kMaxEmbeddingInputs = 2048;           // OpenAI's limit
inline constexpr size_t kMaxEmbeddingRequestTokens = 300000;  // OpenAI's per-request token limit

// What the served model allows; filled in by the service.
struct EmbeddingModel {
  int32_t n_vocab = 0;      // token-id inputs must lie in [0, n_vocab)
  uint32_t native_dim = 0;  // the pooled vector's size; `dimensions` may not exceed it
  size_t context = 0;       // tokens per input, the appended end token included
  size_t max_inputs = kMaxEmbeddingInputs;
  size_t max_request_tokens = kMaxEmbeddingRequestTokens;  // all inputs together
};

enum class EmbeddingEncoding { kFloat, kBase64 };

// One entry of `input`: text, or token ids (exactly one is set).
struct EmbeddingInput {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

struct EmbeddingParams {
  std::string model;                  // empty when not given
  std::string input_param = "input";  // the field the inputs came from ("input" / "content"), for errors
  std::vector<EmbeddingInput> inputs;
  EmbeddingEncoding encoding = EmbeddingEncoding::kFloat;
  std::optional<uint32_t> dimensions;  // nullopt: the native size
  bool normalize = true;
  std::optional<size_t> truncate_tokens;  // keep the last N tokens per input (EOS included)
};

// Validates the body (ApiError(400) naming the field and the problem).
EmbeddingParams parse_embedding_params(const rapidjson::Value& req, const EmbeddingModel& model);

// The id appended to every input, or nullopt for none: whenever the model is a Qwen3 embedding
// model or the GGUF says tokenizer.ggml.add_eos_token, the vocabulary's `<|endoftext|>` (Qwen
// GGUFs name <|im_end|> as eos while the embedding models were trained on <|endoftext|>), or
// the GGUF's eos id for a vocabulary without one; otherwise none.
std::optional<int32_t> embedding_eos_id(const Tokenizer& tok, bool qwen3_embedding);

struct EmbeddingBatch {
  std::vector<std::vector<int32_t>> ids;  // one per input, request order, the end token included
  size_t total_tokens = 0;                // usage.prompt_tokens
};

// Tokenizes text inputs as literal text, applies truncate_tokens, appends `eos` (see the rule
// above) and enforces the limits: an input over the context → 400 "input[i] has N tokens, the
// model's context is C"; the request over max_request_tokens → 400. Work is bounded by the
// request's token limit, not by the text's size.
EmbeddingBatch tokenize_embedding_inputs(const EmbeddingParams& p, const Tokenizer& tok, std::optional<int32_t> eos,
                                         const EmbeddingModel& model);

// A pooled vector as returned: the first `dimensions` values (all when nullopt), then L2
// normalised unless !normalize (a zero vector stays zero). dimensions > pooled.size() throws
// std::invalid_argument (parse_embedding_params refuses it first).
std::vector<float> finish_embedding(std::span<const float> pooled, std::optional<uint32_t> dimensions, bool normalize);

// Standard base64 (with padding) of the values as little-endian float32, OpenAI's "base64".
std::string base64_f32(std::span<const float> values);

// {"object":"list","data":[{"object":"embedding","index":i,"embedding":...}],"model",
//  "usage":{"prompt_tokens","total_tokens"}}; floats in their shortest float32 round-trip form.
std::string embedding_response_json(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                                    EmbeddingEncoding encoding, size_t prompt_tokens);

// ---- shared with the rerank request layer ------------------------------------------------------
using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

// The shortest decimal that reads back as the same float32 (JSON null when not finite: JSON has
// no NaN, and a client can tell null from a score).
void write_f32(JsonWriter& w, float v);

// A leading (trailing) part of `text` whose tokens begin (end) with the first (last) `n_tokens`
// tokens of the whole text, so a long text is truncated without tokenizing all of it. The text
// itself when it is short enough; otherwise it is cut before a space followed by an ASCII letter
// (always a pre-token boundary for Qwen's pre-tokenizers, and safe for NFC) at least n_tokens
// of the longest token away from the kept end, or at a UTF-8 boundary when no such space lies
// within 64 KiB of that.
std::string_view leading_text_for_tokens(std::string_view text, size_t n_tokens, size_t max_token_bytes);
std::string_view trailing_text_for_tokens(std::string_view text, size_t n_tokens, size_t max_token_bytes);

}  // namespace ds::openai
