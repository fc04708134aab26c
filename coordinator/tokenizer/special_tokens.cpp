#include "coordinator/tokenizer/special_tokens.h"

#include <algorithm>

namespace ds::tok {

bool overlaps_any(std::span<const ByteRange> ranges, size_t begin, size_t end) {
  // First range ending after `begin`; ends are increasing because ranges are disjoint.
  const auto it =
      std::upper_bound(ranges.begin(), ranges.end(), begin, [](size_t pos, const ByteRange& r) { return pos < r.end; });
  return it != ranges.end() && it->begin < end;
}

SpecialTokens::SpecialTokens(const Vocab& vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType t = vocab.type(id);
    const bool gated = t == TokenType::CONTROL || t == TokenType::UNKNOWN;
    if (!gated && t != TokenType::USER_DEFINED) continue;
    if (vocab.text(id).empty()) continue;
    entries_.push_back({std::string(vocab.text(id)), id, gated});
  }
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    return a.text.size() != b.text.size() ? a.text.size() > b.text.size() : a.id < b.id;
  });
}

void SpecialTokens::split_fragment(std::string_view text, const Entry& e, const Fragment& f,
                                   std::span<const ByteRange> untrusted, std::vector<Fragment>& out) const {
  const std::string_view window = text.substr(0, f.end);
  size_t cursor = f.begin;  // start of the raw text not yet emitted
  size_t pos = f.begin;     // where the next search starts
  for (;;) {
    const size_t hit = window.find(e.text, pos);
    if (hit == std::string_view::npos) break;
    const size_t hit_end = hit + e.text.size();
    if (e.gated && overlaps_any(untrusted, hit, hit_end)) {
      pos = hit + 1;  // not allowed here; a later occurrence may be
      continue;
    }
    if (hit > cursor) out.push_back({cursor, hit, -1});
    out.push_back({hit, hit_end, e.id});
    cursor = pos = hit_end;
  }
  if (cursor < f.end) out.push_back({cursor, f.end, -1});
}

void SpecialTokens::split(std::string_view text, bool parse_control, std::span<const ByteRange> untrusted,
                          std::vector<Fragment>& out) const {
  out.clear();
  if (text.empty()) return;
  out.push_back({0, text.size(), -1});
  std::vector<Fragment> next;
  for (const Entry& e : entries_) {
    if (e.gated && !parse_control) continue;
    if (text.find(e.text) == std::string_view::npos) continue;  // cheap skip of absent tokens
    next.clear();
    for (const Fragment& f : out) {
      if (f.token >= 0 || f.end - f.begin < e.text.size()) {
        next.push_back(f);
      } else {
        split_fragment(text, e, f, untrusted, next);
      }
    }
    out.swap(next);
  }
}

}  // namespace ds::tok
