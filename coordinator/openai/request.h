// Validated parameters of /v1/chat/completions and /v1/completions. Parsing checks every
// field we understand (types, ranges, unsupported features) and throws ApiError(400) naming
// the field; unknown fields are ignored, as vLLM does. Prompt rendering / tokenization is
// the service's job, not this file's.
#pragma once

#include <rapidjson/document.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/openai/structured_request.h"
#include "coordinator/output_parser/tool_schema.h"
#include "coordinator/serving/generation.h"

namespace ds::openai {

inline constexpr uint32_t kMaxTopLogprobs = 16;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopTokenIds = 64;
inline constexpr uint32_t kMaxChoices = 128;

struct CommonParams {
  std::string model;  // empty when not given
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  std::optional<uint32_t> max_tokens;  // nullopt: up to the context limit
  SamplingParams sampling;             // max_tokens is filled in by the service
  std::vector<std::string> stop;       // matched on decoded text, trimmed from the output
  std::string echo_text;               // output before the generated text (completions' echo); set by the service
  uint32_t n = 1;                      // choices, 1..kMaxChoices (the server may cap it lower)
  StructuredSpec structured;           // structured outputs (response_format, structured_outputs, tool_choice)
};

enum class ToolChoice { kNone, kAuto, kRequired, kFunction };

struct ChatParams : CommonParams {
  bool has_tools = false;
  ToolSchemas tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;     // kFunction
  bool parallel_tool_calls = true;  // false: only the first tool call is returned
  // From reasoning_effort ("none"/"minimal": false, "low"/"medium"/"high": true); unset when
  // it is absent or chat_template_kwargs.enable_thinking (which wins) is given.
  std::optional<bool> enable_thinking;
};

struct CompletionParams : CommonParams {
  // Exactly one is set: the prompt text, or its token ids.
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  bool echo = false;  // the prompt text precedes the completion in choices[].text
};

// Copies the members of an `extra_body` object to the top level where the top level lacks
// them (some clients send extra_body literally instead of merging it).
void merge_extra_body(rapidjson::Document& doc);

ChatParams parse_chat_params(const rapidjson::Value& req);
CompletionParams parse_completion_params(const rapidjson::Value& req);

// 400 naming the parameter for a logit_bias or stop_token_ids id outside [0, n_vocab).
void check_token_ids(const SamplingParams& s, int32_t n_vocab);

}  // namespace ds::openai
