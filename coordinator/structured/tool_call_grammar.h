// The grammar that forces Qwen3.5 tool calls (tool_choice "required" or a named function):
// the output is one call, or with `parallel` one or more, in the XML form the chat template
// teaches and coordinator/output_parser reads back:
//
//   <tool_call>\n<function=NAME>\n
//   <parameter=P>\nVALUE\n</parameter>\n      (per parameter)
//   </function>\n</tool_call>
//
// with exactly "\n" between consecutive calls (the template's separator), nothing before the
// first call and nothing after the last one (then only end-of-generation). The layout is exact:
// no optional whitespace outside JSON values, whose whitespace is bounded by
// GrammarOptions::max_ws.
//
// Parameters are written in the order of the schema's `properties` (then any required names
// that `properties` does not declare, in `required` order); each required one exactly once,
// each optional one at most once. Undeclared parameters are never written, whatever
// additionalProperties says (a subset of what the schema allows, and what the parser types).
// A tool without `parameters` (or without `properties`) has no parameter elements. An
// optional property whose name the parser cannot read back (empty, "<", ">", newline, 256+
// bytes) is left out; a required one is refused.
//
// VALUE follows what the output parser will make of it (param_value.h), so that the parsed
// arguments satisfy the schema:
// - a parameter whose declared types (`type`, or the `type`s of its anyOf/oneOf branches, as
//   the parser reads them) do not include "string" is a JSON value matching its schema
//   (compile_json_schema's rules; $ref resolves within the function's `parameters`);
// - one whose types are only "string" is raw text, kept verbatim by the parser: enum / const
//   as literal alternatives, minLength / maxLength, pattern (exact when anchored at both ends
//   or not at all; a pattern with other anchors is matched in full, a stricter subset) and
//   the enforced formats; the text never contains "</parameter>" and never ends with "\r"
//   (the parser would cut or trim it);
// - one that mixes "string" with other types (["string","null"], anyOf string | integer) is
//   raw text that does not read as one of the other types, or a JSON value of those other
//   types (branches without a `type` are left out: the parser would read them as strings).
// Known gap: "</parameter>" inside a JSON string of a non-string parameter is not excluded
// (it would need the JSON string lexemes intersected with that ban).
#pragma once

#include <rapidjson/document.h>

#include <memory>
#include <string>
#include <vector>

#include "coordinator/structured/grammar.h"

namespace ds::structured {

struct ToolCallConstraint {
  // The functions the call may name; empty = every tool in `tools` (tool_choice "required").
  // One name = tool_choice {"type":"function","function":{"name":...}}.
  std::vector<std::string> names;
  // More than one call (OpenAI parallel_tool_calls).
  bool parallel = false;
};

// `tools` is the request's OpenAI `tools` array (entries {"type":"function","function":{...}}
// or bare function definitions, as the output parser accepts). Throws SchemaError naming the
// JSON Schema keyword it cannot honour, "tools" (not an array, a tool without a name, a name
// the XML form cannot carry, duplicate names) or "tool_choice" (a named function that is not
// among the tools).
std::shared_ptr<const Grammar> compile_tool_calls(const rapidjson::Value& tools, const ToolCallConstraint& constraint,
                                                  const GrammarOptions& opt = {});

}  // namespace ds::structured
