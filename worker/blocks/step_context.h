// What a block sees of a step: the backend and its scratch, the stage's pooled sequence state,
// the step's rows and positions, and an optional tap for named intermediates. Blocks take
// their input and return their output explicitly; the workspace slots they use in between are
// scratch (a block's output slot is valid until the next block runs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "worker/backend.h"
#include "worker/blocks/spans.h"
#include "worker/blocks/workspace.h"
#include "worker/cache/stage_cache.h"
#include "worker/stage_model.h"  // BlockTap

namespace ds {

// Host-side scratch the blocks reuse across steps (so the steady state allocates nothing).
struct BlockScratch {
  std::vector<GdnSeq> gdn_seqs;                // every sequence of a step, for the GDN mixer
  std::vector<uint32_t> slots;                 // ... and their state slots
  std::vector<AttentionBatchSeq> decode_seqs;  // every sequence of a step, for attention
};

struct StepContext {
  Backend& be;
  Workspace& ws;
  StageCache& cache;
  BlockScratch& scratch;
  const ModelConfig& cfg;
  const std::vector<SeqSpan>& spans;
  size_t T;                       // token rows of the step
  const int32_t* positions;       // host [3][T]: rope positions (three streams: M-RoPE)
  const uint32_t* kv_rows;        // host [T]: the pool row of every token's K/V
  const BlockTap* tap = nullptr;  // null or empty: no taps
};

// Hands `rows` (device, [T, width]) to the tap under "blk.<layer>.<what>".
inline void tap(const StepContext& ctx, uint32_t layer, const char* what, const float* rows, size_t width) {
  if (ctx.tap == nullptr || !*ctx.tap) return;
  std::vector<float> host(ctx.T * width);
  ctx.be.download(host.data(), rows, host.size());
  (*ctx.tap)("blk." + std::to_string(layer) + "." + what, host, width);
}

}  // namespace ds
