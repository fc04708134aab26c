#include "common/base64.h"

#include <algorithm>
#include <array>

namespace ds {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr int8_t kWhitespace = -2, kPad = -3, kInvalid = -1;

constexpr std::array<int8_t, 256> decode_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = kInvalid;
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  for (char c : {' ', '\t', '\r', '\n', '\f', '\v'}) t[static_cast<uint8_t>(c)] = kWhitespace;
  t['='] = kPad;
  return t;
}

constexpr std::array<int8_t, 256> kDecode = decode_table();

std::optional<std::vector<uint8_t>> fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return std::nullopt;
}

std::string describe(unsigned char c) {
  static const char* hex = "0123456789abcdef";
  std::string s = "0x";
  s += hex[c >> 4];
  s += hex[c & 15];
  if (c >= 0x21 && c < 0x7f) s += std::string(" '") + static_cast<char>(c) + "'";
  return s;
}

}  // namespace

std::string base64_encode(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = uint32_t{bytes[i]} << 16 | uint32_t{bytes[i + 1]} << 8 | bytes[i + 2];
    for (int k = 3; k >= 0; --k) out += kAlphabet[(v >> (6 * k)) & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    const uint32_t v = uint32_t{bytes[i]} << 16 | (rest == 2 ? uint32_t{bytes[i + 1]} << 8 : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::vector<uint8_t>> base64_decode(std::string_view text, size_t max_bytes, std::string* error) {
  std::vector<uint8_t> out;
  out.reserve(std::min(text.size() / 4 * 3 + 3, max_bytes));
  uint32_t group = 0;  // the bits of the current 4-character group
  int in_group = 0, pads = 0;
  for (size_t at = 0; at < text.size(); ++at) {
    const int8_t v = kDecode[static_cast<unsigned char>(text[at])];
    if (v == kWhitespace) continue;
    if (v == kInvalid) {
      return fail(error, "invalid base64 character " + describe(static_cast<unsigned char>(text[at])) + " at offset " +
                             std::to_string(at));
    }
    if (v == kPad) {
      if (in_group < 2) return fail(error, "misplaced base64 padding at offset " + std::to_string(at));
      ++pads;
      if (in_group + pads > 4) return fail(error, "too much base64 padding at offset " + std::to_string(at));
      continue;
    }
    if (pads > 0) return fail(error, "base64 data after the padding at offset " + std::to_string(at));
    group = group << 6 | static_cast<uint32_t>(v);
    if (++in_group == 4) {
      if (out.size() + 3 > max_bytes)
        return fail(error, "the decoded data exceeds " + std::to_string(max_bytes) + " bytes");
      out.push_back(static_cast<uint8_t>(group >> 16));
      out.push_back(static_cast<uint8_t>(group >> 8));
      out.push_back(static_cast<uint8_t>(group));
      group = 0;
      in_group = 0;
    }
  }
  if (pads > 0 && in_group + pads != 4) return fail(error, "incomplete base64 padding");
  if (in_group == 1) return fail(error, "truncated base64 data (a lone final character)");
  if (in_group > 1) {
    const size_t extra = in_group == 2 ? 1 : 2;
    if (out.size() + extra > max_bytes)
      return fail(error, "the decoded data exceeds " + std::to_string(max_bytes) + " bytes");
    group <<= 6 * (4 - in_group);
    out.push_back(static_cast<uint8_t>(group >> 16));
    if (extra == 2) out.push_back(static_cast<uint8_t>(group >> 8));
  }
  return out;
}

}  // namespace ds
