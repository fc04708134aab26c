// JSON bodies of OpenAI responses: chat.completion, chat.completion.chunk, text_completion
// (both forms), usage and logprobs. Pure functions of their inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/output_parser/output_parser.h"
#include "coordinator/serving/generation.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds::openai {

struct ResponseMeta {
  std::string id;     // "chatcmpl-..." / "cmpl-..."
  std::string model;  // the served model name
  int64_t created = 0;
  uint32_t choice_index = 0;  // choices[].index of this reply's choice (n > 1)
};

struct Usage {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;  // prompt tokens reused from the prefix cache
  // Extension (engines with speculative decoding on): "speculative": {"drafted_tokens",
  // "accepted_tokens", "mean_accepted_length"}.
  std::optional<SpecCounts> speculative = std::nullopt;
};

// Logprobs of consecutive generated tokens; token text comes from the tokenizer.
struct LogprobsView {
  const Tokenizer* tokenizer = nullptr;
  const std::vector<GeneratedToken>* tokens = nullptr;  // null: "logprobs": null
  size_t text_offset = 0;                               // completions: offset of the first token in the choice's text
};

// ---- chat ------------------------------------------------------------------------------------
std::string chat_completion_json(const ResponseMeta& meta, const ParseResult& result, const std::string& finish_reason,
                                 const LogprobsView& logprobs, const Usage& usage);
// One streaming chunk. `with_role`: the first chunk announces role "assistant".
// Empty `finish_reason`: JSON null.
std::string chat_chunk_json(const ResponseMeta& meta, const ParseDelta& delta, bool with_role,
                            const LogprobsView& logprobs, const std::string& finish_reason);

// ---- completions -----------------------------------------------------------------------------
std::string completion_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                            const LogprobsView& logprobs, const Usage& usage);
std::string completion_chunk_json(const ResponseMeta& meta, const std::string& text, const LogprobsView& logprobs,
                                  const std::string& finish_reason);

// The final streaming chunk of stream_options.include_usage: no choices, just usage.
std::string usage_chunk_json(const ResponseMeta& meta, const char* object, const Usage& usage);

// `s` with each byte outside a well-formed UTF-8 sequence replaced by U+FFFD (token pieces
// may split characters).
std::string sanitize_utf8(std::string_view s);

}  // namespace ds::openai
