// How a step lays out its sequences' token rows: one span a sequence in the concatenated batch
// (the Gated DeltaNet mixer hands them to Backend::gdn_mix as GdnSeq), and whether the spans
// make a plain decode step. Shared by every block and model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/image_span.h"
#include "worker/backend.h"
#include "worker/cache/stage_cache.h"

namespace ds {

// Token rows of one sequence inside the concatenated batch.
struct SeqSpan {
  StageCache::Seq* seq;  // slot and block table
  size_t offset;         // first row
  size_t n_tokens;
  uint32_t start_pos;
  uint32_t n_draft = 0;  // trailing draft rows: GDN state captured after each verify row but the last
  // Vision input: the sequence's images (SeqStep::images), whose M-RoPE positions its rows take;
  // nullptr for text (plain positions).
  const std::vector<ImageSpan>* images = nullptr;
};

// Plain decode: every span is one token (no drafts) and span i sits at row i.
inline bool one_row_per_span(const std::vector<SeqSpan>& spans) {
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].n_tokens != 1 || spans[i].offset != i || spans[i].n_draft != 0) return false;
  }
  return true;
}

}  // namespace ds
