// Small byte-level scanning helpers shared by the parser states. All tags the parser knows
// are ASCII, so byte comparisons are safe on UTF-8 text.
#pragma once

#include <cstddef>
#include <string_view>

namespace ds {

inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

inline size_t count_whitespace(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && is_space(s[n])) ++n;
  return n;
}

inline size_t count_non_whitespace(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && !is_space(s[n])) ++n;
  return n;
}

inline std::string_view trim_space(std::string_view s) {
  s.remove_prefix(count_whitespace(s));
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

enum class TagMatch { kNone, kPartial, kFull };

// Does `text` start with `tag` (kFull), or is it a proper prefix of it so more input could
// still complete the tag (kPartial)?
inline TagMatch match_tag(std::string_view text, std::string_view tag) {
  if (text.size() >= tag.size()) return text.substr(0, tag.size()) == tag ? TagMatch::kFull : TagMatch::kNone;
  return tag.substr(0, text.size()) == text ? TagMatch::kPartial : TagMatch::kNone;
}

// Length of the longest suffix of `text` that is a proper prefix of `tag`: those bytes must
// be held back because the next chunk may complete the tag.
inline size_t tag_prefix_suffix(std::string_view text, std::string_view tag) {
  size_t n = text.size() < tag.size() ? text.size() : tag.size() - 1;
  for (; n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace ds
