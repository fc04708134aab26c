// Small UTF-8 helpers for the tokenizer: validating one sequence at a time (so a stream can
// hold back an incomplete tail) and replacing invalid bytes with U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ds::tok {

// What sits at the start of a byte buffer.
struct Utf8Step {
  enum Kind { VALID, INCOMPLETE, INVALID };
  Kind kind = INVALID;
  // VALID: sequence length (1..4). INCOMPLETE: bytes present (a valid prefix that ran out of
  // input). INVALID: length of the maximal invalid subpart (>= 1), replaced by one U+FFFD.
  size_t len = 0;
  uint32_t cp = 0;  // the code point when VALID
};

// Inspects the sequence at p[0..n); n >= 1. Follows Unicode's well-formed table (no
// overlongs, no surrogates, nothing above U+10FFFF).
Utf8Step utf8_step(const uint8_t* p, size_t n);

void append_utf8(std::string& out, uint32_t cp);

// Appends `in` to `out` as valid UTF-8, each maximal invalid subpart becoming U+FFFD.
// When `final` is false an incomplete sequence at the very end is left unconsumed.
// Returns the number of bytes of `in` consumed.
size_t append_sanitized_utf8(std::string_view in, std::string& out, bool final);

// Number of code points, counting each invalid subpart as one.
size_t utf8_length(std::string_view s);

}  // namespace ds::tok
