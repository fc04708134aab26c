// Minimal UTF-8 helpers for Python-compatible string semantics: Python strings index, slice
// and strip by code point, and str.strip() removes Unicode whitespace (U+3000 etc.).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace ds::jinja {

// Byte length of the UTF-8 sequence at s[i] (1 for invalid bytes, so any input advances).
size_t utf8_seq_len(std::string_view s, size_t i);
uint32_t utf8_decode(std::string_view s, size_t i);
// Byte offsets of each code point start, plus s.size() as the final element.
std::vector<size_t> utf8_boundaries(std::string_view s);
size_t utf8_length(std::string_view s);
// Python's str.isspace() set.
bool is_py_space(uint32_t cp);
// [begin, end) after Python strip/lstrip/rstrip. `chars` = nullptr means whitespace.
std::pair<size_t, size_t> py_strip_bounds(std::string_view s, const std::string_view* chars, bool left,
                                          bool right);

}  // namespace ds::jinja
