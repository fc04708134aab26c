// The older Qwen3 tool-call body: `{"name": ..., "arguments": {...}}` between <tool_call>
// tags.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ds {

struct JsonToolCall {
  std::string name;
  std::string arguments;  // compact JSON object text (or the model's own string, verbatim)
};

// nullopt when `body` is not a JSON object with a non-empty string "name" and, if present,
// an object (or string) "arguments" (alias "parameters").
std::optional<JsonToolCall> parse_json_tool_call(std::string_view body);

}  // namespace ds
