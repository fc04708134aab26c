// The Gated DeltaNet mixer (qwen35-model-spec.md §5): input projections, causal conv + SiLU,
// q/k L2 norms, the gated delta-rule recurrence over the sequence's state slot, the gated
// RMSNorm and the output projection. A step mixes prefill chunks, decode tokens and
// speculative verify rows (whose state is captured after every verified token); the block picks
// the backend ops for the mix, each of which keeps a token's bits independent of the batching.
#pragma once

#include "worker/blocks/step_context.h"

namespace ds {

struct GdnWeights {
  WeightView qkv, gate, alpha, beta, out;
  const float* conv = nullptr;      // [C][Kc]
  const float* dt_bias = nullptr;   // [nv]
  const float* a = nullptr;         // [nv], = -exp(A_log)
  const float* ssm_norm = nullptr;  // [dv], shared by all value heads
  // Stacked copies (Backend::weight_stack; data == nullptr when the backend keeps them apart):
  // [qkv ; gate] and [alpha ; beta]; qkv/gate/alpha/beta are then row ranges of these. When all
  // four share a type, in_proj = [qkv ; gate ; alpha ; beta] is one stack (one decode GEMV) and
  // the other two are row ranges of it.
  WeightView qkv_gate, alpha_beta, in_proj;
};

// `x`: the normed input rows [T, D] (device); `state_layer`: the layer's place in a state slot.
// Returns the output projection [T, D] (device, the workspace's kOut slot).
const float* gated_delta_net(const StepContext& ctx, const GdnWeights& w, size_t state_layer, const float* x,
                             uint32_t layer);

}  // namespace ds
