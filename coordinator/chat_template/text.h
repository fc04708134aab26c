// Text: a string whose bytes remember where they came from (template literal = trusted,
// request data = untrusted). Every string value in the evaluator is a Text, so provenance
// survives `+`, `~`, macros and filters all the way into the final PromptText.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "coordinator/prompt_text.h"

namespace ds::jinja {

class Text {
 public:
  Text() = default;
  static Text trusted(std::string s);
  static Text untrusted(std::string s);
  // The result of a transformation that may mix bytes (upper, replace, tojson, repr):
  // untrusted as a whole when any input byte was untrusted.
  static Text derived(std::string s, bool untrusted) {
    return untrusted ? Text::untrusted(std::move(s)) : trusted(std::move(s));
  }

  const std::string& str() const { return str_; }
  size_t size() const { return str_.size(); }
  bool empty() const { return str_.empty(); }
  bool any_untrusted() const { return !ranges_.empty(); }
  const std::vector<ByteRange>& untrusted_ranges() const { return ranges_; }

  void append(const Text& other);
  void append_trusted(std::string_view s) { str_.append(s); }
  void append_untrusted(std::string_view s);
  // Appends bytes [pos, pos + n) of `src` with their own provenance: extraction (slicing,
  // strip, split) never changes which party wrote a byte, so it stays byte-exact. This keeps
  // template markup such as `<|image_pad|>` trusted after `render_content(...)|trim`.
  void append_slice(const Text& src, size_t pos, size_t n);
  Text slice(size_t pos, size_t n) const;

  void append_to(PromptText& out) const;

 private:
  void mark_untrusted(size_t begin, size_t end);

  std::string str_;
  std::vector<ByteRange> ranges_;  // sorted, disjoint, non-empty, merged when adjacent
};

}  // namespace ds::jinja
