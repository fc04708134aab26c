#include "coordinator/output_parser/utf8.h"

namespace ds {
namespace {

bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

// Sequence length announced by a lead byte; 0 for bytes that cannot start a sequence.
size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 0;
}

}  // namespace

size_t utf8_complete_prefix(std::string_view s) {
  // A sequence is at most 4 bytes, so only the last 3 bytes can belong to an unfinished one.
  const size_t lookback = s.size() < 4 ? s.size() : 4;
  for (size_t back = 1; back <= lookback; ++back) {
    const size_t at = s.size() - back;
    const auto c = static_cast<unsigned char>(s[at]);
    if (is_continuation(c)) continue;
    const size_t need = sequence_length(c);
    return (need > back) ? at : s.size();
  }
  return s.size();  // only continuation bytes (invalid): pass them through
}

void Utf8Splitter::push(std::string_view bytes, std::string& out) {
  if (pending_.empty()) {
    const size_t n = utf8_complete_prefix(bytes);
    out.append(bytes.substr(0, n));
    pending_.assign(bytes.substr(n));
    return;
  }
  pending_.append(bytes);
  const size_t n = utf8_complete_prefix(pending_);
  out.append(pending_, 0, n);
  pending_.erase(0, n);
}

void Utf8Splitter::flush(std::string& out) {
  if (!pending_.empty()) out.append("\xEF\xBF\xBD");
  pending_.clear();
}

}  // namespace ds
