#include "coordinator/tokenizer/utf8.h"

namespace ds::tok {

namespace {

constexpr uint32_t kReplacement = 0xFFFD;

struct LeadInfo {
  size_t need;     // continuation bytes that follow
  uint32_t bits;   // payload bits of the lead byte
  uint8_t lo, hi;  // allowed range of the first continuation byte
};

// Returns false for bytes that can never start a sequence (80-C1, F5-FF).
bool lead_info(uint8_t b, LeadInfo& li) {
  if (b >= 0xC2 && b <= 0xDF) {
    li = {1, b & 0x1Fu, 0x80, 0xBF};
  } else if (b >= 0xE0 && b <= 0xEF) {
    li = {2, b & 0x0Fu, static_cast<uint8_t>(b == 0xE0 ? 0xA0 : 0x80),
          static_cast<uint8_t>(b == 0xED ? 0x9F : 0xBF)};
  } else if (b >= 0xF0 && b <= 0xF4) {
    li = {3, b & 0x07u, static_cast<uint8_t>(b == 0xF0 ? 0x90 : 0x80),
          static_cast<uint8_t>(b == 0xF4 ? 0x8F : 0xBF)};
  } else {
    return false;
  }
  return true;
}

}  // namespace

Utf8Step utf8_step(const uint8_t* p, size_t n) {
  if (p[0] < 0x80) return {Utf8Step::VALID, 1, p[0]};
  LeadInfo li{};
  if (!lead_info(p[0], li)) return {Utf8Step::INVALID, 1, 0};
  uint32_t cp = li.bits;
  uint8_t lo = li.lo;
  uint8_t hi = li.hi;
  for (size_t i = 1; i <= li.need; ++i) {
    if (i >= n) return {Utf8Step::INCOMPLETE, i, 0};
    if (p[i] < lo || p[i] > hi) return {Utf8Step::INVALID, i, 0};
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (p[i] & 0x3Fu);
  }
  return {Utf8Step::VALID, li.need + 1, cp};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t append_sanitized_utf8(std::string_view in, std::string& out, bool final) {
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  const size_t n = in.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path.
    size_t j = i;
    while (j < n && p[j] < 0x80) ++j;
    out.append(in.data() + i, j - i);
    i = j;
    if (i == n) break;
    const Utf8Step s = utf8_step(p + i, n - i);
    if (s.kind == Utf8Step::VALID) {
      out.append(in.data() + i, s.len);
    } else if (s.kind == Utf8Step::INCOMPLETE && !final) {
      return i;  // hold the tail back until more bytes arrive
    } else {
      append_utf8(out, kReplacement);
    }
    i += s.len;
  }
  return n;
}

size_t utf8_length(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t count = 0;
  for (size_t i = 0; i < s.size(); ++count) i += utf8_step(p + i, s.size() - i).len;
  return count;
}

}  // namespace ds::tok
