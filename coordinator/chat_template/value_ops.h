// Python semantics of operators, subscripts and attribute access on template values.
// All failures throw EvalError (the evaluator adds the template position).
#pragma once

#include <string>

#include "coordinator/chat_template/ast.h"
#include "coordinator/chat_template/value.h"

namespace ds::jinja {

// Arithmetic and `~`; `max_bytes` bounds strings/lists built by `+`, `*` and `~`.
Value binary_op(BinOp op, const Value& a, const Value& b, size_t max_bytes);
Value negate(const Value& v);
bool compare_op(CmpOp op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

// `obj.name`: dict/string methods first (as Jinja's getattr does), then dict keys and
// namespace attributes. Missing -> undefined (also on undefined/none: lenient chaining).
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: out of range or missing -> undefined.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` on strings (by code point) and lists; null bounds = none.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// What a `for` loop walks: list items, dict keys, string characters; undefined -> empty.
List iteration_items(const Value& v);
// Number of items (len()).
int64_t length_of(const Value& v);

}  // namespace ds::jinja
