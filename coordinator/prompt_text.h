// A rendered prompt with provenance: which bytes came from request data (message content,
// tool arguments, names) rather than from the chat template's own literal markup.
// The tokenizer never turns untrusted bytes into CONTROL tokens (prompt-injection defence):
// `<|im_end|>` typed by a user stays plain text.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ds {

struct ByteRange {
  size_t begin = 0;  // inclusive
  size_t end = 0;    // exclusive
};

struct PromptText {
  std::string text;
  // Sorted, non-overlapping, non-empty ranges of `text` that came from request data.
  std::vector<ByteRange> untrusted;

  // Appends template-owned text (control tokens allowed).
  void append_trusted(const std::string& s) { text += s; }
  // Appends request data (control tokens never recognized inside it); merges adjacent ranges.
  void append_untrusted(const std::string& s) {
    if (s.empty()) return;
    const size_t b = text.size();
    text += s;
    if (!untrusted.empty() && untrusted.back().end == b) {
      untrusted.back().end = text.size();
    } else {
      untrusted.push_back({b, text.size()});
    }
  }
};

}  // namespace ds
