#include "coordinator/output_parser/text_channel.h"

#include "coordinator/output_parser/text_scan.h"

namespace ds {

void TextChannel::push(std::string_view text, std::string& out) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t ws = count_whitespace(text.substr(i));
    if (ws > 0) {
      // Leading whitespace is dropped outright; inner whitespace waits for the next word.
      if (touched_) {
        for (size_t k = 0; k < ws; ++k) {
          held_.push_back(text[i + k]);
          if (held_.size() > kMaxHeldWhitespace) {
            emit(held_, out);
            held_.clear();
          }
        }
      }
      i += ws;
      continue;
    }
    const size_t word = count_non_whitespace(text.substr(i));
    if (!held_.empty()) {
      emit(held_, out);
      held_.clear();
    }
    emit(text.substr(i, word), out);
    touched_ = true;
    i += word;
  }
}

void TextChannel::finish(std::string& out) {
  held_.clear();
  utf8_.flush(out);
}

}  // namespace ds
