#include "coordinator/tokenizer/incremental_decoder.h"

#include "common/utf8.h"

namespace ds {

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool render_control)
    : tokenizer_(&tokenizer), render_control_(render_control) {}

std::string IncrementalDecoder::feed(int32_t id) {
  const std::string_view piece = tokenizer_->token_piece(id, render_control_);  // may throw
  pending_.append(piece);
  std::string out;
  const size_t used = utf8::append_sanitized(pending_, out, false);
  pending_.erase(0, used);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out;
  utf8::append_sanitized(pending_, out, true);
  pending_.clear();
  return out;
}

}  // namespace ds
