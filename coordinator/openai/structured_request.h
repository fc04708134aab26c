// Structured outputs at the request layer: which constraint a request asks for, and its
// compilation into a grammar (cached by its text: agents send the same schema again and again,
// and the grammar keeps the token-mask caches warm across requests).
//
// Request fields (at most one of them; a second is a 400):
//   response_format: {"type": "json_object"} | {"type": "json_schema", "json_schema": {"name",
//     "schema", "strict"}} (also {"type": "json_schema", "schema": {...}}, as llama-server takes)
//   structured_outputs (vLLM): {"json": schema | JSON text} | {"regex": "..."} | {"choice": [...]}
//     | {"json_object": true}; the older guided_json / guided_regex / guided_choice likewise;
//   json_schema (llama-server): a schema;
//   tool_choice "required" or a named function (chat, with tools): a Qwen3.5 tool call whose
//     arguments follow the function's parameters.
// "strict": false is accepted and enforced like true (the output always follows the schema).
#pragma once

#include <rapidjson/document.h>

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ds::structured {
class Grammar;
}  // namespace ds::structured

namespace ds::openai {

struct StructuredSpec {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kToolCalls };
  Kind kind = Kind::kNone;
  std::string param;  // the request field that asked for it (error messages)
  std::string text;   // kJsonSchema: the schema (compact JSON); kRegex: the pattern; kToolCalls: tools JSON
  std::vector<std::string> choices;     // kChoice
  std::vector<std::string> tool_names;  // kToolCalls: the functions allowed (one: a named function)
  bool parallel_tool_calls = true;      // kToolCalls: one or more calls
  bool active() const { return kind != Kind::kNone; }
};

// Reads the response_format / structured_outputs / guided_* / json_schema fields (400 naming
// the field for a malformed or conflicting one). Tool-call constraints are set by the caller.
StructuredSpec parse_structured_spec(const rapidjson::Value& req);

// The grammars of recent specs. compile() throws ApiError(400) naming the spec's field and the
// schema keyword it cannot honour; thread-safe.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  std::shared_ptr<const structured::Grammar> compile(const StructuredSpec& spec);

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const structured::Grammar>>;
  size_t capacity_;
  std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace ds::openai
