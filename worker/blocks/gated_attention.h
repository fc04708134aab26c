// Full (causal) attention with per-head q/k RMSNorm, (M-)RoPE, GQA over the paged KV cache, and
// optionally the Qwen3.5 output gate: attn_q then carries [query | gate] per head and the
// attention output is multiplied by sigmoid(gate) (ModelConfig::attn_output_gate;
// qwen35-model-spec.md §4). Without the gate (Qwen3) attn_q carries the query alone.
#pragma once

#include "worker/blocks/step_context.h"

namespace ds {

struct AttentionWeights {
  WeightView q, k, v, o;  // q: [D -> H*d], or [D -> 2*H*d] per head [query | gate] with the output gate
  WeightView qkv;         // stacked [q ; k ; v] when the backend stacks (q, k, v are row ranges of it)
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
};

// `x`: the normed input rows [T, D] (device); `kv_pool`: the layer's KV pool. Every token's K/V
// row is written to its sequence's page, then each sequence attends over its rows. Returns the
// output projection [T, D] (device, the workspace's kOut slot).
const float* gated_attention(const StepContext& ctx, const AttentionWeights& w, size_t kv_pool, const float* x,
                             uint32_t layer);

}  // namespace ds
