// CUDA twin of kernels/cpu/attention_segments.h: bidirectional multi-head attention within
// segments of a step's rows (the vision tower's per-image attention), flash-style: one block per
// (64 query rows of a segment, head, segment) walks that segment's key rows in tiles of 32 through
// shared memory with an online softmax, so no score matrix is stored: a block holds 64 x 32
// probabilities at a time, whatever the segment's length (a 4096-patch image included).
//
// f32 throughout (CUDA cores): q * scale, the dot products, expf of the shifted scores, the running
// max / sum and the weighted V sum in f32; only the summation order differs from the CPU's, which
// stays within the f32 attention bound of the other attention kernels (relative 2e-5,
// tests/backend_ops/test_backend_ops_vision.cpp).
//
// Conditions (else cudaErrorInvalidValue / cudaErrorMisalignedAddress, nothing queued):
// head_dim % 4 == 0 and <= kSegmentAttentionMaxHeadDim; n_heads and n_segments <= 65535;
// k, v and out 16-byte aligned, qkv_stride and out_stride multiples of 4 (float4 rows; q may be
// 4-byte aligned); strides >= n_heads * head_dim.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/attention_segments.h"  // SegmentAttention

namespace ds::cuda {

using cpu::SegmentAttention;

inline constexpr size_t kSegmentAttentionMaxHeadDim = 128;

// `a.starts` is a DEVICE array [n_segments + 1] whose host copy the caller has checked
// (cpu::segment_attention_problem: ordered bounds from 0 to n_tokens); the kernel cannot check it. `max_segment_rows`:
// the longest segment (sizes the grid; blocks past a shorter segment's end return at once). Work is queued on `stream`.
cudaError_t attention_segments(const SegmentAttention& a, size_t max_segment_rows, cudaStream_t stream);

}  // namespace ds::cuda
