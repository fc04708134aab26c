// UTF-8 helpers shared by the tokenizer, the chat template engine, the output parser and the
// OpenAI layer. Two readings of a byte string are offered, because the callers need both:
//
//  * strict: Unicode's table of well-formed byte sequences (Unicode 15, table 3-7): no
//    overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF. An ill-formed
//    sequence is reported as its "maximal subpart" (the longest prefix that could still have
//    started a well-formed sequence, at least one byte), which is what U+FFFD replacement
//    follows (`step`, `is_valid`, `length`, `append_sanitized`, `sanitize`).
//  * loose: structure only. A lead byte announces a length by its bit pattern and the bytes
//    after it must be continuation bytes; the value is not checked (overlongs, surrogates and
//    F4 90.. / F5..F7 leads decode to whatever their bits say). A byte that starts no such
//    sequence stands for itself, as one code point with its byte value. This is what the chat
//    template engine uses for Python string semantics, where every input must index
//    (`decode_loose`, `length_loose`, `boundaries_loose`), and what stream splitting uses to
//    find a tail that may still complete (`complete_prefix`, `Splitter`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds::utf8 {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
inline constexpr uint32_t kReplacement = 0xFFFD;  // U+FFFD REPLACEMENT CHARACTER
inline constexpr std::string_view kReplacementBytes = "\xEF\xBF\xBD";

constexpr bool is_continuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

// Sequence length a lead byte announces by its bit pattern alone: 1 (00..7F), 2 (C0..DF),
// 3 (E0..EF) or 4 (F0..F7); 0 for bytes that start nothing (continuations 80..BF, F8..FF).
constexpr size_t announced_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 0;
}

// Appends the 1..4 byte encoding of `cp` (cp <= U+10FFFF; surrogates are encoded as given).
void append(std::string& out, uint32_t cp);

// ---- strict -------------------------------------------------------------------------------

// What sits at the start of a byte buffer, read strictly.
struct Step {
  enum Kind { VALID, INCOMPLETE, INVALID };
  Kind kind = INVALID;
  // VALID: sequence length (1..4). INCOMPLETE: bytes present (a well-formed prefix that ran
  // out of input). INVALID: length of the maximal subpart (>= 1).
  size_t len = 0;
  uint32_t cp = 0;  // the code point when VALID
};

// Reads the sequence at p[0..n); n >= 1.
Step step(const uint8_t* p, size_t n);
// Reads the sequence at s[i..); i < s.size().
inline Step step(std::string_view s, size_t i) {
  return step(reinterpret_cast<const uint8_t*>(s.data()) + i, s.size() - i);
}

// True when all of `s` is well-formed (an incomplete tail is not).
bool is_valid(std::string_view s);

// Number of code points, counting each maximal invalid subpart (and an incomplete tail) as one.
size_t length(std::string_view s);

// How ill-formed input becomes U+FFFD.
enum class Replace {
  kMaximalSubpart,  // one U+FFFD per maximal subpart (Unicode's recommended practice)
  kEachByte,        // one U+FFFD per byte that is not part of a well-formed sequence
};

// Appends `in` to `out` as valid UTF-8, ill-formed input replaced with U+FFFD as `mode` says.
// When `final` is false, an incomplete sequence at the very end is left unconsumed (for a
// stream to hold back until more bytes arrive); when true it is replaced too.
// Returns the number of bytes of `in` consumed.
size_t append_sanitized(std::string_view in, std::string& out, bool final, Replace mode = Replace::kMaximalSubpart);

// `in` as valid UTF-8 (append_sanitized with final = true).
std::string sanitize(std::string_view in, Replace mode = Replace::kMaximalSubpart);

// ---- loose --------------------------------------------------------------------------------

struct Loose {
  size_t len = 1;   // 1..4; 1 for a byte that starts no complete sequence
  uint32_t cp = 0;  // the value the bits spell, or the byte itself when len is 1
};

// Reads the sequence at s[i..) loosely; i < s.size(). Always advances by at least one byte.
Loose decode_loose(std::string_view s, size_t i);

// Number of loose code points.
size_t length_loose(std::string_view s);

// Byte offset of each loose code point, followed by s.size().
std::vector<size_t> boundaries_loose(std::string_view s);

// ---- streaming ----------------------------------------------------------------------------

// Length of the longest prefix of `s` that does not end inside an incomplete sequence: a
// trailing lead byte (loose) with fewer continuation bytes after it than it announces is cut
// off. Only the tail is inspected; invalid bytes elsewhere pass.
size_t complete_prefix(std::string_view s);

// Buffers the incomplete tail of a byte stream so that what it hands out always ends on a
// character boundary. Bytes are passed through otherwise unchanged.
class Splitter {
 public:
  // Appends `bytes` and moves every complete character to `out`.
  void push(std::string_view bytes, std::string& out);
  // End of stream: a dangling partial sequence becomes one U+FFFD (it can never complete).
  void flush(std::string& out);

 private:
  std::string pending_;
};

}  // namespace ds::utf8
