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

#include "coordinator/output_parser/tool_schema.h"
#include "coordinator/serving/generation.h"

namespace ds::openai {

inline constexpr uint32_t kMaxTopLogprobs = 16;
inline constexpr size_t kMaxStopStrings = 16;

struct CommonParams {
  std::string model;  // empty when not given
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  std::optional<uint32_t> max_tokens;  // nullopt: up to the context limit
  SamplingParams sampling;             // max_tokens is filled in by the service
  std::vector<std::string> stop;       // matched on decoded text, trimmed from the output
};

enum class ToolChoice { kNone, kAuto, kRequired, kFunction };

struct ChatParams : CommonParams {
  bool has_tools = false;
  ToolSchemas tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kFunction
};

struct CompletionParams : CommonParams {
  // Exactly one is set: the prompt text, or its token ids.
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
};

// Copies the members of an `extra_body` object to the top level where the top level lacks
// them (some clients send extra_body literally instead of merging it).
void merge_extra_body(rapidjson::Document& doc);

ChatParams parse_chat_params(const rapidjson::Value& req);
CompletionParams parse_completion_params(const rapidjson::Value& req);

}  // namespace ds::openai
