#include "common/utf8.h"

namespace ds::utf8 {

namespace {

struct LeadInfo {
  size_t need;     // continuation bytes that follow
  uint32_t bits;   // payload bits of the lead byte
  uint8_t lo, hi;  // allowed range of the first continuation byte
};

// Strict lead bytes; false for bytes that can never start a well-formed sequence (80-C1, F5-FF).
bool lead_info(uint8_t b, LeadInfo& li) {
  if (b >= 0xC2 && b <= 0xDF) {
    li = {1, b & 0x1Fu, 0x80, 0xBF};
  } else if (b >= 0xE0 && b <= 0xEF) {
    li = {2, b & 0x0Fu, static_cast<uint8_t>(b == 0xE0 ? 0xA0 : 0x80),  // E0: no overlongs
          static_cast<uint8_t>(b == 0xED ? 0x9F : 0xBF)};               // ED: no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    li = {3, b & 0x07u, static_cast<uint8_t>(b == 0xF0 ? 0x90 : 0x80),  // F0: no overlongs
          static_cast<uint8_t>(b == 0xF4 ? 0x8F : 0xBF)};               // F4: <= U+10FFFF
  } else {
    return false;
  }
  return true;
}

}  // namespace

void append(std::string& out, uint32_t cp) {
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

Step step(const uint8_t* p, size_t n) {
  if (p[0] < 0x80) return {Step::VALID, 1, p[0]};
  LeadInfo li{};
  if (!lead_info(p[0], li)) return {Step::INVALID, 1, 0};
  uint32_t cp = li.bits;
  uint8_t lo = li.lo;
  uint8_t hi = li.hi;
  for (size_t i = 1; i <= li.need; ++i) {
    if (i >= n) return {Step::INCOMPLETE, i, 0};
    if (p[i] < lo || p[i] > hi) return {Step::INVALID, i, 0};
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (p[i] & 0x3Fu);
  }
  return {Step::VALID, li.need + 1, cp};
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Step st = step(s, i);
    if (st.kind != Step::VALID) return false;
    i += st.len;
  }
  return true;
}

size_t length(std::string_view s) {
  size_t count = 0;
  for (size_t i = 0; i < s.size(); ++count) i += step(s, i).len;
  return count;
}

size_t append_sanitized(std::string_view in, std::string& out, bool final, Replace mode) {
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
    const Step s = step(p + i, n - i);
    if (s.kind == Step::VALID) {
      out.append(in.data() + i, s.len);
      i += s.len;
      continue;
    }
    if (s.kind == Step::INCOMPLETE && !final) return i;  // hold the tail back
    out.append(kReplacementBytes);
    i += mode == Replace::kEachByte ? 1 : s.len;
  }
  return n;
}

std::string sanitize(std::string_view in, Replace mode) {
  std::string out;
  out.reserve(in.size());
  append_sanitized(in, out, /*final=*/true, mode);
  return out;
}

Loose decode_loose(std::string_view s, size_t i) {
  const auto c = static_cast<uint8_t>(s[i]);
  const size_t n = announced_length(c);
  if (n <= 1 || i + n > s.size()) return {1, c};
  uint32_t cp = c & (0x7Fu >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (!is_continuation(b)) return {1, c};
    cp = (cp << 6) | (b & 0x3Fu);
  }
  return {n, cp};
}

size_t length_loose(std::string_view s) {
  size_t count = 0;
  for (size_t i = 0; i < s.size(); ++count) i += decode_loose(s, i).len;
  return count;
}

std::vector<size_t> boundaries_loose(std::string_view s) {
  std::vector<size_t> b;
  b.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); i += decode_loose(s, i).len) b.push_back(i);
  b.push_back(s.size());
  return b;
}

size_t complete_prefix(std::string_view s) {
  // A sequence is at most 4 bytes, so only the last 3 bytes can belong to an unfinished one.
  const size_t lookback = s.size() < 4 ? s.size() : 4;
  for (size_t back = 1; back <= lookback; ++back) {
    const size_t at = s.size() - back;
    const auto c = static_cast<uint8_t>(s[at]);
    if (is_continuation(c)) continue;
    return announced_length(c) > back ? at : s.size();
  }
  return s.size();  // only continuation bytes (invalid): pass them through
}

void Splitter::push(std::string_view bytes, std::string& out) {
  if (pending_.empty()) {
    const size_t n = complete_prefix(bytes);
    out.append(bytes.substr(0, n));
    pending_.assign(bytes.substr(n));
    return;
  }
  pending_.append(bytes);
  const size_t n = complete_prefix(pending_);
  out.append(pending_, 0, n);
  pending_.erase(0, n);
}

void Splitter::flush(std::string& out) {
  if (!pending_.empty()) out.append(kReplacementBytes);
  pending_.clear();
}

}  // namespace ds::utf8
