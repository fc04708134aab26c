#include "coordinator/chat_template/py_string.h"

#include "common/utf8.h"

namespace ds::jinja {

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
  for (size_t i = 0; i < chars->size();) {
    const utf8::Loose c = utf8::decode_loose(*chars, i);
    if (c.cp == cp) return true;
    i += c.len;
  }
  return false;
}

}  // namespace

std::pair<size_t, size_t> py_strip_bounds(std::string_view s, const std::string_view* chars, bool left, bool right) {
  size_t b = 0;
  size_t e = s.size();
  if (left) {
    while (b < e) {
      const utf8::Loose c = utf8::decode_loose(s, b);
      if (!in_set(c.cp, chars)) break;
      b += c.len;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      // Walk back to the lead byte of the last code point.
      while (start > b && utf8::is_continuation(static_cast<uint8_t>(s[start])) && e - start < 4) --start;
      utf8::Loose c = utf8::decode_loose(s, start);
      if (c.len != e - start) {
        start = e - 1;
        c = utf8::decode_loose(s, start);
      }
      if (!in_set(c.cp, chars)) break;
      e = start;
    }
  }
  return {b, e};
}

}  // namespace ds::jinja
