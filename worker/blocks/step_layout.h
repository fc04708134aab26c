// What every model file shares around a step: binding matrices that share an input as one
// stack, and at the start of a step: validate the whole step before any state changes, place its
// sequences in the stage cache, lay out their rows (SeqSpan) and fill the rope positions and
// the pool row of every token's K/V. Shared by every model file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "worker/backend.h"
#include "worker/blocks/spans.h"
#include "worker/cache/stage_cache.h"
#include "worker/stage_model.h"

namespace ds {

struct StepLimits {
  uint32_t n_vocab = 0;
  uint32_t max_context = 0;  // 0: none
  // Drafts a sequence may verify in one step (the MTP captures); 0: the model has no MTP block,
  // so a step with drafts or a rewind is refused.
  uint32_t max_drafts = 0;
  const char* arch = "";  // named in errors
  // Whether the model ropes by M-RoPE positions, so a sequence may carry images
  // (SeqStep::images); a step with images for any other model is refused.
  bool images = false;
};

// Throws ConfigError naming the sequence and the problem: no tokens, a sequence twice, a token
// id outside the vocabulary, a logit row outside the step, drafts the model cannot verify, the
// context limit, images the model cannot take or that are malformed (image_spans_problem); then
// the cache's own checks (StageCache::check_step). Image pixels are the embedder's to check.
void check_step(const StepInput& in, const StepLimits& limits, const StageCache& cache);

// Rope positions ([3][T]: the M-RoPE streams t, h, w; three identical ones for text, the
// image-aware ones of mrope_positions for a span with images) and the pool row of every token's
// K/V ([T]) for the spans' rows.
void fill_positions(const std::vector<SeqSpan>& spans, size_t T, const StageCache& cache,
                    std::vector<int32_t>* positions, std::vector<uint32_t>* kv_rows);

// Places the (checked) step's sequences (StageCache::begin_step), records their images on them
// (StageCache::Seq::images) and lays out their rows in order, then fill_positions.
std::vector<SeqSpan> lay_out_step(const StepInput& in, StageCache& cache, std::vector<int32_t>* positions,
                                  std::vector<uint32_t>* kv_rows);

// Matrices that share an input (`names`, in order), stacked row-wise when the backend can
// (Backend::weight_stack: one product for all at decode); `parts` get their own views either way:
// row ranges of the stack, or the separate weights when the backend does not stack.
WeightView stack_weights(Backend& be, const GgufFile& gguf, const std::vector<std::string>& names,
                         const std::vector<WeightView*>& parts);

}  // namespace ds
