#include "coordinator/chat_template/utf8.h"

namespace ds::jinja {

size_t utf8_seq_len(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 1;
  if (c >= 0xF0 && c < 0xF8) {
    n = 4;
  } else if (c >= 0xE0) {
    n = c < 0xF0 ? 3 : 1;
  } else if (c >= 0xC0) {
    n = 2;
  }
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

uint32_t utf8_decode(std::string_view s, size_t i) {
  const size_t n = utf8_seq_len(s, i);
  const auto c = static_cast<unsigned char>(s[i]);
  if (n == 1) return c;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

std::vector<size_t> utf8_boundaries(std::string_view s) {
  std::vector<size_t> b;
  b.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); i += utf8_seq_len(s, i)) b.push_back(i);
  b.push_back(s.size());
  return b;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += utf8_seq_len(s, i)) ++n;
  return n;
}

bool is_py_space(uint32_t cp) {
  if (cp >= 0x09 && cp <= 0x0D) return true;
  if (cp >= 0x1C && cp <= 0x20) return true;
  if (cp == 0x85 || cp == 0xA0 || cp == 0x1680) return true;
  if (cp >= 0x2000 && cp <= 0x200A) return true;
  return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

bool in_set(uint32_t cp, const std::string_view* chars) {
  if (chars == nullptr) return is_py_space(cp);
  for (size_t i = 0; i < chars->size(); i += utf8_seq_len(*chars, i)) {
    if (utf8_decode(*chars, i) == cp) return true;
  }
  return false;
}

}  // namespace

std::pair<size_t, size_t> py_strip_bounds(std::string_view s, const std::string_view* chars, bool left,
                                          bool right) {
  size_t b = 0;
  size_t e = s.size();
  if (left) {
    while (b < e && in_set(utf8_decode(s, b), chars)) b += utf8_seq_len(s, b);
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      // Walk back to the lead byte of the last code point.
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && e - start < 4) --start;
      if (utf8_seq_len(s, start) != e - start) start = e - 1;
      if (!in_set(utf8_decode(s, start), chars)) break;
      e = start;
    }
  }
  return {b, e};
}

}  // namespace ds::jinja
