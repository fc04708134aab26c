// Python str semantics the template engine needs beyond plain UTF-8: Python strings strip by
// code point, and str.strip()/split() treat Unicode whitespace (U+3000 etc.) as space. Code
// points are read loosely (common/utf8.h), so any byte string has an answer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

namespace ds::jinja {

// Python's str.isspace() set.
bool is_py_space(uint32_t cp);
// [begin, end) after Python strip/lstrip/rstrip. `chars` = nullptr means whitespace.
std::pair<size_t, size_t> py_strip_bounds(std::string_view s, const std::string_view* chars, bool left, bool right);

}  // namespace ds::jinja
