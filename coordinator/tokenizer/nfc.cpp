#include "coordinator/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/utf8.h"
#include "coordinator/tokenizer/nfc_tables.h"

namespace ds::tok {

namespace {

// Hangul syllables compose and decompose algorithmically (Unicode §3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr uint32_t kSCount = kLCount * kNCount;

struct Char {
  uint32_t cp;
  uint32_t ccc;  // canonical combining class
};

uint32_t combining_class(uint32_t cp) {
  if (cp < nfc::kCccRanges[0].lo) return 0;
  const auto* end = nfc::kCccRanges + nfc::kCccRanges_size;
  const auto* it =
      std::upper_bound(nfc::kCccRanges, end, cp, [](uint32_t c, const nfc::CccRange& r) { return c < r.lo; });
  if (it == nfc::kCccRanges) return 0;
  --it;
  return cp <= it->hi ? it->ccc : 0;
}

bool maybe_changed(uint32_t cp) {
  if (cp < nfc::kMaybeChanged[0].lo) return false;
  const auto* end = nfc::kMaybeChanged + nfc::kMaybeChanged_size;
  const auto* it =
      std::upper_bound(nfc::kMaybeChanged, end, cp, [](uint32_t c, const nfc::CodepointRange& r) { return c < r.lo; });
  return it != nfc::kMaybeChanged && cp <= (it - 1)->hi;
}

// Appends the full canonical decomposition of `cp`.
void decompose(uint32_t cp, std::vector<Char>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back({kLBase + s / kNCount, 0});
    out.push_back({kVBase + (s % kNCount) / kTCount, 0});
    if (s % kTCount != 0) out.push_back({kTBase + s % kTCount, 0});
    return;
  }
  const auto* end = nfc::kDecompositions + nfc::kDecompositions_size;
  const auto* it =
      std::lower_bound(nfc::kDecompositions, end, cp, [](const nfc::Decomposition& d, uint32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back({cp, combining_class(cp)});
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// Primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* end = nfc::kCompositions + nfc::kCompositions_size;
  const auto* it = std::lower_bound(nfc::kCompositions, end, std::pair{a, b},
                                    [](const nfc::Composition& c, std::pair<uint32_t, uint32_t> k) {
                                      return c.first != k.first ? c.first < k.first : c.second < k.second;
                                    });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

// Stable sort of each run of non-starters by combining class (canonical ordering).
void canonical_order(std::vector<Char>& s) {
  for (size_t i = 1; i < s.size(); ++i) {
    for (size_t j = i; j > 0 && s[j].ccc != 0 && s[j - 1].ccc > s[j].ccc; --j) std::swap(s[j], s[j - 1]);
  }
}

// Canonical composition in place: a character joins the last starter unless blocked by an
// intervening character of class 0 or of a class >= its own.
void canonical_compose(std::vector<Char>& s) {
  size_t starter = SIZE_MAX;
  size_t w = 0;
  for (size_t r = 0; r < s.size(); ++r) {
    const Char c = s[r];
    if (starter != SIZE_MAX) {
      const uint32_t prev_ccc = s[w - 1].ccc;
      if (w - 1 == starter || (prev_ccc != 0 && prev_ccc < c.ccc)) {
        if (const uint32_t comp = compose(s[starter].cp, c.cp)) {
          s[starter] = {comp, combining_class(comp)};
          continue;
        }
      }
    }
    if (c.ccc == 0) starter = w;
    s[w++] = c;
  }
  s.resize(w);
}

bool already_nfc(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const utf8::Step st = utf8::step(p + i, text.size() - i);
    if (st.kind == utf8::Step::VALID && maybe_changed(st.cp)) return false;
    i += st.len;
  }
  return true;
}

void flush_run(std::vector<Char>& run, std::string& out) {
  canonical_order(run);
  canonical_compose(run);
  for (const Char& c : run) utf8::append(out, c.cp);
  run.clear();
}

}  // namespace

bool nfc_normalize(std::string_view text, std::string& out) {
  if (already_nfc(text)) return false;
  out.clear();
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  std::vector<Char> run;  // decomposed code points of the current valid UTF-8 run
  for (size_t i = 0; i < text.size();) {
    const utf8::Step st = utf8::step(p + i, text.size() - i);
    if (st.kind == utf8::Step::VALID) {
      decompose(st.cp, run);
    } else {
      flush_run(run, out);
      out.append(text.data() + i, st.len);
    }
    i += st.len;
  }
  flush_run(run, out);
  return true;
}

}  // namespace ds::tok
