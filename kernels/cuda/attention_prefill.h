// Causal grouped-query attention for PREFILL (many query tokens of one sequence) over the paged KV
// cache: the same contract as ds::cuda::attention_causal (kernels/cuda/attention.h; CPU twin
// cpu::attention_causal), computed flash-style: one block per (64 query tokens, query head) walks
// the key rows in tiles of 32 through shared memory with an online softmax, so every K/V row is
// read once per query tile instead of once per query token.
//
// f32 throughout (CUDA cores): scores, softmax and the weighted V sum round like the per-token
// kernel, only the summation order differs, so the f32 model tolerances hold unchanged.
// head_dim <= 256 (every Qwen3.5 size uses 256). Status codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/attention.h"  // AttentionShape, KvPages

namespace ds::cuda {

inline constexpr size_t kAttentionPrefillMaxHeadDim = 256;
// Steps with at least this many query tokens of a sequence are worth the tiled kernel.
inline constexpr size_t kAttentionPrefillMinTokens = 16;

// Whether attention_prefill takes these arguments (head_dim % 4 == 0, 16-byte aligned pools and
// output, strides in whole float4s); otherwise use attention_causal.
bool attention_prefill_applies(const AttentionShape& s, const float* q, const KvPages& kv, const float* out);

cudaError_t attention_prefill(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out,
                              cudaStream_t stream);

// The same on bf16 tensor cores (mma.sync m16n8k16, f32 accumulation; sm_80 and later): q * scale,
// K, V and the softmax weights P are rounded to bf16 (relative 2^-9 each), scores, the running
// max/sum and the output accumulate in f32. For the backend's bf16 prefill mode. The sequence's
// K/V rows are gathered to bf16 scratch first (the per-stream workspace of matmul_fast.h).
// head_dim 64, 128 or 256 plus attention_prefill's conditions.
bool attention_prefill_tc_applies(const AttentionShape& s, const float* q, const KvPages& kv, const float* out);

cudaError_t attention_prefill_tc(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out,
                                 cudaStream_t stream);

}  // namespace ds::cuda
