// Standard base64 (RFC 4648 §4: A-Z a-z 0-9 + /, '=' padding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

// With padding.
std::string base64_encode(std::span<const uint8_t> bytes);

// The bytes, or std::nullopt with `error` (when given) saying why not. Strict about the alphabet:
// only A-Z a-z 0-9 + / are data (the URL-safe - and _ are not). ASCII whitespace (space, tab, CR,
// LF, FF, VT) is skipped anywhere, since wrapped base64 (76-column MIME lines) is common. Padding
// is optional, but '=' may appear only at the end, at most twice, and must complete a 4-character
// group; a lone trailing character (length 1 mod 4) is an error. Stops early (error) once the
// decoded size would exceed `max_bytes`.
std::optional<std::vector<uint8_t>> base64_decode(std::string_view text, size_t max_bytes = SIZE_MAX,
                                                  std::string* error = nullptr);

}  // namespace ds
