// UTF-8 boundary helpers for streaming text: a delta must never end inside a multi-byte
// sequence, because clients decode each delta on its own.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ds {

// Length of the longest prefix of `s` that does not end inside an incomplete UTF-8
// sequence. Only the tail is inspected; invalid bytes elsewhere are not our concern here.
size_t utf8_complete_prefix(std::string_view s);

// Buffers the incomplete tail of a byte stream so that what it hands out always ends on a
// character boundary.
class Utf8Splitter {
 public:
  // Appends `bytes` and moves every complete character to `out`.
  void push(std::string_view bytes, std::string& out);
  // End of stream: a dangling partial sequence becomes U+FFFD (it can never complete).
  void flush(std::string& out);

 private:
  std::string pending_;
};

}  // namespace ds
