// Bridges between RapidJSON and template values, and the `tojson` serializer that reproduces
// Python's json.dumps byte for byte (the reference renderer is transformers' Jinja setup).
#pragma once

#include <rapidjson/document.h>

#include <string>

#include "coordinator/chat_template/value.h"

namespace ds::jinja {

// Every string (and object key) taken from JSON is request data: untrusted. Throws EvalError
// beyond 256 levels of nesting.
Value value_from_json(const rapidjson::Value& json);

struct JsonDumpOptions {
  int indent = -1;              // < 0: single line; >= 0: pretty with this many spaces per level
  std::string item_sep = ", ";  // Python default; "," when indenting
  std::string key_sep = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};

// json.dumps(v, ensure_ascii=False) by default. Untrusted as a whole when any string inside
// is untrusted. Throws EvalError for values JSON cannot represent (undefined, callables).
Text to_json(const Value& v, const JsonDumpOptions& opts = {});

}  // namespace ds::jinja
