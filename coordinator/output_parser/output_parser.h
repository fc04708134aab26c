// Incremental parser for Qwen3.5 model output (qwen35-model-spec.md §9.2, §9.4): splits the
// decoded text into reasoning and content and extracts tool calls, for streaming (feed()
// per decoded chunk) and non-streaming (result()) OpenAI responses.
//
// Chunks may split anywhere, even inside a tag or a UTF-8 sequence; the concatenation of all
// deltas does not depend on where the splits fall. Text that may still become a tag is held
// back until decided. No exception escapes feed()/finish(); memory held for undecided tags
// is bounded (kMaxTagBytes).
//
// Caveat of streaming: a tool call's name is sent as soon as `<function=NAME>` is complete.
// If that call later proves malformed (e.g. cut off by max_tokens) its raw text is sent as
// text, and result() does not list it; a streaming client has already seen the name.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/output_parser/call_id.h"
#include "coordinator/output_parser/tool_schema.h"

namespace ds {

// One OpenAI streaming tool-call fragment. `id` and `name` are set only on a call's first
// fragment; `arguments` fragments concatenate to the call's arguments JSON text.
struct ToolCallDelta {
  size_t index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

// What became certain during one feed()/finish() call.
struct ParseDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;

  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// A complete call (the OpenAI `type` is always "function").
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text, e.g. {"city":"Paris","days":3}
};

struct ParseResult {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;
};

struct OutputParserOptions {
  // The generation prompt ended with "<think>\n": the model starts inside reasoning.
  bool thinking_open = false;
  // Recognize tool calls at all (false for tool_choice "none" or a request without tools).
  bool tools_enabled = false;
  // The request's tool definitions; they type the XML parameters.
  ToolSchemas tools;
  // false (OpenAI parallel_tool_calls): only the first complete call is reported; later calls
  // are still recognized (their markup is not text) but dropped from deltas and result().
  bool parallel_tool_calls = true;
  // Makes call ids; empty means random_tool_call_id(). Tests inject a deterministic one.
  ToolCallIdGenerator make_call_id;
};

class ParserCore;

class OutputParser {
 public:
  // Longest undecided tag-like text held back before it is released as plain text.
  static constexpr size_t kMaxTagBytes = 256;

  explicit OutputParser(OutputParserOptions options);
  ~OutputParser();
  OutputParser(OutputParser&&) noexcept;
  OutputParser& operator=(OutputParser&&) noexcept;

  // Consumes the next chunk of decoded model text; returns what can be emitted now.
  ParseDelta feed(std::string_view text);
  // End of generation: resolves everything still held back. Further feeds are ignored.
  ParseDelta finish();
  // Everything emitted so far, accumulated (complete after finish()).
  const ParseResult& result() const;

 private:
  std::unique_ptr<ParserCore> core_;
};

}  // namespace ds
