// One streamed text field (reasoning or content). It trims the field as a whole: leading
// whitespace is dropped, trailing whitespace is held back until more text proves it inner
// (the chat template puts newlines around think blocks and before tool calls that must not
// reach the client). Output is always cut on UTF-8 character boundaries.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/utf8.h"

namespace ds {

class TextChannel {
 public:
  // A run of held whitespace longer than this is released: bounded memory beats trimming.
  static constexpr size_t kMaxHeldWhitespace = 256;

  // Appends model text; whatever is ready to emit goes to `out`.
  void push(std::string_view text, std::string& out);
  // Forgets held trailing whitespace (the text before a tool call ends here).
  void drop_held() { held_.clear(); }
  // End of the field: drops trailing whitespace and flushes a dangling UTF-8 tail.
  void finish(std::string& out);
  // True once any non-whitespace text was accepted.
  bool touched() const { return touched_; }

 private:
  void emit(std::string_view bytes, std::string& out) { utf8_.push(bytes, out); }

  bool touched_ = false;
  std::string held_;
  utf8::Splitter utf8_;
};

}  // namespace ds
