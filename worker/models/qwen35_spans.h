// How a qwen35 step lays out its sequences' token rows (worker/models/qwen35.cpp): one span a
// sequence in the concatenated batch, the pieces its GDN rows run in, and what kind of step the
// spans make (plain decode, verify rows only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/backend.h"
#include "worker/cache/stage_cache.h"

namespace ds::qwen35 {

// Token rows of one sequence inside the concatenated batch.
struct SeqSpan {
  StageCache::Seq* seq;  // slot and block table
  size_t offset;         // first row
  size_t n_tokens;
  uint32_t start_pos;
  uint32_t n_draft = 0;  // trailing draft rows: GDN state captured after each verify row but the last
};

// Pieces a sequence's GDN rows run in: one piece up to and including the first verify row,
// then one per further verify row, so the state after each can be captured (capture = the
// capture index after the piece, -1 = none). Single-token pieces are what plain decoding
// runs, so on CPU a verified token's state is bit-identical to decoding it alone.
struct GdnPiece {
  size_t offset, n_tokens;
  int capture;
};
inline std::vector<GdnPiece> gdn_pieces(const SeqSpan& s) {
  if (s.n_draft == 0) return {{s.offset, s.n_tokens, -1}};
  std::vector<GdnPiece> out{{s.offset, s.n_tokens - s.n_draft, 0}};
  for (size_t j = 1; j <= s.n_draft; ++j) {  // verify row j sits at n_tokens - 1 - n_draft + j
    out.push_back({s.offset + s.n_tokens - 1 - s.n_draft + j, 1, j < s.n_draft ? static_cast<int>(j) : -1});
  }
  return out;
}

// A speculative verify row: one token, then its drafts.
inline bool is_verify_row(const SeqSpan& s) { return s.n_draft > 0 && s.n_tokens == s.n_draft + 1; }

inline bool all_verify_rows(const std::vector<SeqSpan>& spans) {
  for (const SeqSpan& s : spans) {
    if (!is_verify_row(s)) return false;
  }
  return !spans.empty();
}

// `r`'s rows from row `first` on.
inline GdnRawGates raw_gate_rows(const GdnRawGates& r, size_t first) {
  return GdnRawGates{r.alpha + first * r.alpha_stride, r.alpha_stride, r.beta_raw + first * r.beta_stride,
                     r.beta_stride, r.a, r.dt_bias};
}

// Plain decode: every span is one token (no drafts) and span i sits at row i.
inline bool one_row_per_span(const std::vector<SeqSpan>& spans) {
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].n_tokens != 1 || spans[i].offset != i || spans[i].n_draft != 0) return false;
  }
  return true;
}

}  // namespace ds::qwen35
