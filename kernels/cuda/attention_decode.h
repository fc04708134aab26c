// Internal (not part of the public contract): the split-K ("flash-decoding") path behind
// ds::cuda::attention_causal for few query tokens (decode, MTP verify rows).
//
// The keys of each query token are cut into splits; one block per (split, kv head, token) scores
// its keys against all query heads of the GQA group (each K row is loaded once for the group),
// keeps an online softmax per head (running max, sum, weighted V) over sub-chunks of keys, and
// writes a partial (max, sum, acc[d]) per (token, head, split). A second kernel merges the
// splits. Same math as kernels/cpu/attention.cpp in f32; only the summation order differs.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cpu/attention.h"

namespace ds::cuda::detail {

// At most this many query tokens and query heads per kv head take the split-K path.
inline constexpr size_t kDecodeMaxQTokens = 8;
inline constexpr size_t kDecodeMaxGroup = 8;

// True when the split-K path handles `s` (few query tokens, group <= 8, head_dim <= 256).
bool attention_decode_applies(const cpu::AttentionShape& s);

// Arguments are checked by the caller (ds::cuda::attention_causal). Uses the per-stream
// workspace of matmul_fast.h for the partials.
cudaError_t attention_decode(const cpu::AttentionShape& s, const float* q, const cpu::KvPages& kv, float scale,
                             float* out, cudaStream_t stream);

}  // namespace ds::cuda::detail
