// Added-token split (qwen35-model-spec.md §8.3 step 1): literal occurrences of CONTROL,
// UNKNOWN and USER_DEFINED token texts become single ids before any BPE. Tokens are
// processed longest first over the whole text, each splitting the raw fragments the
// longer ones left (the reference order, so overlapping candidates resolve the same way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/prompt_text.h"
#include "coordinator/tokenizer/vocab.h"

namespace ds::tok {

struct Fragment {
  size_t begin = 0;  // byte range [begin, end) of the text
  size_t end = 0;
  int32_t token = -1;  // the matched added token, or -1 for raw text (to be BPE-encoded)
};

class SpecialTokens {
 public:
  explicit SpecialTokens(const Vocab& vocab);

  // Splits `text` into raw fragments and added-token matches, in text order. USER_DEFINED
  // tokens always match. CONTROL/UNKNOWN tokens match only when `parse_control` is set and
  // the occurrence does not overlap `untrusted` (sorted, disjoint ranges).
  void split(std::string_view text, bool parse_control, std::span<const ByteRange> untrusted,
             std::vector<Fragment>& out) const;

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string text;
    int32_t id;
    bool gated;  // CONTROL or UNKNOWN: needs parse_control and trusted bytes
  };
  void split_fragment(std::string_view text, const Entry& e, const Fragment& f, std::span<const ByteRange> untrusted,
                      std::vector<Fragment>& out) const;

  std::vector<Entry> entries_;  // longest text first, ties by id
};

// True when [begin, end) intersects any of the sorted, disjoint `ranges`.
bool overlaps_any(std::span<const ByteRange> ranges, size_t begin, size_t end);

}  // namespace ds::tok
