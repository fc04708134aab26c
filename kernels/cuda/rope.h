// CUDA twin of kernels/cpu/rope.h: partial NEOX rotary embedding with M-RoPE stream selection,
// in place. `positions` is a DEVICE array [3][n_tokens] (t, h, w streams). n_rot must be even,
// <= head_dim and <= 2 * kMaxRopeHalf. Status codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace ds::cuda {

inline constexpr size_t kMaxRopeHalf = 256;  // frequency slots passed to the kernel by value

cudaError_t rope_neox(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride,
                      size_t head_dim, size_t n_rot, const int32_t* positions, std::array<int32_t, 4> sections,
                      float theta, cudaStream_t stream);

// The vision tower's 2D rope (cpu::rope_2d): NEOX pairs over the whole head (head_dim % 4 == 0,
// head_dim <= 2 * kMaxRopeHalf); pair i < head_dim/4 turns by the row, the others by the column.
// `positions` is a DEVICE array [2][n_tokens] (rows, then columns). Same inverse frequencies
// (host f32 pow, as the CPU) and angles; cos/sin within 2 ulp of the CPU's.
cudaError_t rope_2d(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride, size_t head_dim,
                    const int32_t* positions, float theta, cudaStream_t stream);

}  // namespace ds::cuda
