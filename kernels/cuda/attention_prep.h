// CUDA twin of the attention layer's per-token prep (kernels/cpu/attention_prep.h) in ONE launch:
// what Backend::attention_prep's default does with six (q-head RMSNorm, k-head RMSNorm, q rope,
// k rope, K scatter, V scatter). At decode each of those is a few-microsecond launch per attention
// layer. Grid: tokens x groups of heads, one warp per (token, head): a q or k head is normed, then
// roped, by norm_rope.cuh's functions, the ones the separate rms_norm / rope_neox kernels run, so
// the result is bit for bit theirs (tests/kernels/cuda/test_cuda_attention_prep.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/attention_prep.h"

namespace ds::cuda {

// Head dims taken: rms_norm's one-warp-per-row range (wider rows take its block reductions, whose
// bits this kernel would not match). Wider: run the separate ops.
inline constexpr size_t kAttentionPrepMaxHeadDim = 1023;

// Whether the one-launch kernel takes `p` (head_dim within kAttentionPrepMaxHeadDim; block KV
// types hold a head in registers: head_dim <= 256). Otherwise run the separate ops.
inline bool attention_prep_applies(const cpu::AttentionPrep& p) {
  const bool blocks = kv_type_has_scales(p.k_type) || kv_type_has_scales(p.v_type);
  return p.head_dim <= kAttentionPrepMaxHeadDim && (!blocks || p.head_dim <= 256);
}

// Runs `p` on the device. Every pointer of `p`, positions and kv_rows included, is a DEVICE
// pointer here (the backend uploads the host arrays). Returns cudaErrorInvalidValue for a shape
// attention_prep_problem rejects or n_rot / 2 > kMaxRopeHalf, too many tokens for one grid;
// cudaErrorNotSupported for head_dim > kAttentionPrepMaxHeadDim; cudaErrorMisalignedAddress
// for an array that is not 4-byte aligned; otherwise the launch status.
cudaError_t attention_prep(const cpu::AttentionPrep& p, cudaStream_t stream);

}  // namespace ds::cuda
