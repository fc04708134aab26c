#include "coordinator/chat_template/text.h"

#include <algorithm>

namespace ds::jinja {

Text Text::trusted(std::string s) {
  Text t;
  t.str_ = std::move(s);
  return t;
}

Text Text::untrusted(std::string s) {
  Text t;
  t.str_ = std::move(s);
  t.mark_untrusted(0, t.str_.size());
  return t;
}

void Text::mark_untrusted(size_t begin, size_t end) {
  if (begin >= end) return;
  if (!ranges_.empty() && ranges_.back().end == begin) {
    ranges_.back().end = end;
  } else {
    ranges_.push_back({begin, end});
  }
}

void Text::append(const Text& other) {
  append_slice(other, 0, other.size());
}

void Text::append_untrusted(std::string_view s) {
  const size_t b = str_.size();
  str_.append(s);
  mark_untrusted(b, str_.size());
}

void Text::append_slice(const Text& src, size_t pos, size_t n) {
  pos = std::min(pos, src.size());
  n = std::min(n, src.size() - pos);
  const size_t base = str_.size();
  str_.append(src.str_, pos, n);
  for (const ByteRange& r : src.ranges_) {
    const size_t b = std::max(r.begin, pos);
    const size_t e = std::min(r.end, pos + n);
    if (b < e) mark_untrusted(base + (b - pos), base + (e - pos));
  }
}

Text Text::slice(size_t pos, size_t n) const {
  Text t;
  t.append_slice(*this, pos, n);
  return t;
}

void Text::append_to(PromptText& out) const {
  size_t at = 0;
  for (const ByteRange& r : ranges_) {
    out.append_trusted(str_.substr(at, r.begin - at));
    out.append_untrusted(str_.substr(r.begin, r.end - r.begin));
    at = r.end;
  }
  out.append_trusted(str_.substr(at));
}

}  // namespace ds::jinja
