// CUDA twin of kernels/cpu/attention.h: causal grouped-query softmax attention over one
// sequence's paged KV cache (KvPages holds DEVICE pointers: the pools and the block table;
// layouts and strides as in AttentionShape, rows mapped by cpu::kv_row_offset).
// f32 scores and softmax, computed online (running max and sum), so any kv_len works with no
// per-row score buffer. head_dim <= kMaxAttentionHeadDim. Status codes as in kernels/cuda/norm.h.
// Up to 8 query tokens with GQA groups of <= 8 heads (decode, MTP verify rows) take the split-K
// path of attention_decode.h (many blocks per sequence; per-stream scratch for the partials);
// other shapes take one block per (query token, head).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/attention.h"  // AttentionShape

namespace ds::cuda {

using cpu::AttentionShape;
using cpu::KvPages;

inline constexpr size_t kMaxAttentionHeadDim = 256;

cudaError_t attention_causal(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out,
                             cudaStream_t stream);

}  // namespace ds::cuda
