// Python methods callable from templates: str.startswith/endswith/split/strip/lstrip/rstrip/
// replace/upper/lower/title/capitalize/find/count/join and dict.get/items/keys/values.
#pragma once

#include <optional>
#include <string>

#include "coordinator/chat_template/value.h"

namespace ds::jinja {

// The bound method `obj.name`, or undefined when obj has no such method.
Value bound_method(const Value& obj, const std::string& name);

// Shared with the filters of the same name.
Value str_strip(const Text& s, const Value& chars, bool left, bool right);
Value str_split(const Text& s, const Value& sep, int64_t maxsplit);
Value str_replace(const Text& s, const Text& old_s, const Text& new_s, int64_t count);
Value str_case(const Text& s, char mode);  // 'u' upper, 'l' lower, 't' title, 'c' capitalize
Value dict_items(const Dict& d);

}  // namespace ds::jinja
