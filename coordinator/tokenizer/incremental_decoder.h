// Streaming detokenizer for token-by-token output (SSE streams).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "coordinator/tokenizer/tokenizer.h"

namespace ds {

// Streaming detokenizer: feed ids one at a time, get back only complete UTF-8 (a character
// split across tokens is held until its last byte arrives; invalid bytes become U+FFFD).
// Keeps a pointer to the tokenizer, which must outlive it (and not be moved from). One
// decoder per stream; not thread-safe itself.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool render_control = false);

  // Text completed by this token (possibly empty). Throws std::out_of_range on a bad id
  // (the decoder state is unchanged then).
  std::string feed(int32_t id);
  // Whatever is still held back, invalid or incomplete bytes as U+FFFD; then resets.
  std::string flush();
  void reset() { pending_.clear(); }
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool render_control_;
  std::string pending_;  // < 4 bytes: an incomplete UTF-8 prefix
};

}  // namespace ds
