// Device math shared by the separate RMSNorm and rope kernels (norm.cu, rope.cu) and the fused
// attention prep (attention_prep.cu). One definition of each step, so the fused kernel gives the
// separate launches' bits (tests/kernels/cuda/test_cuda_attention_prep.cpp checks it).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.h"  // kMaxRopeHalf

namespace ds::cuda::detail {

// ---- RMSNorm, one warp per row ----------------------------------------------------------------

// Sum of squares of one row, f32 lane partials then a shuffle tree (the CPU sums in double; the
// difference is far below the tolerance of any consumer).
__device__ __forceinline__ float row_sum_squares(const float* x, size_t dim, unsigned lane) {
  float s = 0.0f;
  for (size_t i = lane; i < dim; i += kWarp) s += x[i] * x[i];
  return warp_sum(s);
}

// y = x / sqrt(mean(x^2) + eps) * w (w may be nullptr: no gain), by the whole warp. Each lane
// reads and writes only its own indices, so y == x is safe; other lanes' writes are visible to
// a lane only after a __syncwarp().
__device__ __forceinline__ void warp_rms_norm_row(const float* x, const float* w, float eps, size_t dim, float* y,
                                                  unsigned lane) {
  const float mean_sq = row_sum_squares(x, dim, lane) / static_cast<float>(dim);
  const float s = 1.0f / sqrtf(mean_sq + eps);
  for (size_t i = lane; i < dim; i += kWarp) y[i] = w != nullptr ? (x[i] * s) * w[i] : x[i] * s;
}

// ---- partial NEOX rope with M-RoPE streams ---------------------------------------------------

// Per frequency slot: inverse frequency and position stream. Computed on the host with the exact
// expressions of kernels/cpu/rope.cpp (f32 pow), so the device only multiplies and rotates; passed
// by value (1.3 KB of kernel parameters), which avoids a device allocation per call.
struct RopeTable {
  float inv_freq[kMaxRopeHalf];
  uint8_t stream[kMaxRopeHalf];
};

inline size_t rope_stream_of_slot(size_t i, const std::array<int32_t, 4>& sections) {
  const size_t sh = sections[1] > 0 ? static_cast<size_t>(sections[1]) : 0;
  const size_t sw = sections[2] > 0 ? static_cast<size_t>(sections[2]) : 0;
  if (i % 3 == 1 && i < 3 * sh) return 1;
  if (i % 3 == 2 && i < 3 * sw) return 2;
  return 0;
}

// n_rot / 2 <= kMaxRopeHalf (the launchers check it).
inline RopeTable make_rope_table(size_t n_rot, const std::array<int32_t, 4>& sections, float theta) {
  RopeTable tab{};
  for (size_t i = 0; i < n_rot / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(n_rot);
    tab.inv_freq[i] = 1.0f / std::pow(theta, exponent);
    tab.stream[i] = static_cast<uint8_t>(rope_stream_of_slot(i, sections));
  }
  return tab;
}

// cos and sin of frequency slot i for token t; positions is the device array [3][n_tokens].
__device__ __forceinline__ void rope_cos_sin(const RopeTable& tab, size_t i, const int32_t* positions, size_t n_tokens,
                                             size_t t, float* cos_out, float* sin_out) {
  const float pos = static_cast<float>(positions[tab.stream[i] * n_tokens + t]);
  const float angle = __fmul_rn(pos, tab.inv_freq[i]);  // rounded, as the CPU's product (never contracted)
  *cos_out = cosf(angle);
  *sin_out = sinf(angle);
}

// Rotates the pair (z[i], z[i + half]) of one head by the slot's angle: a * c - b * s and
// b * c + a * s. The fused multiply-adds are spelled out (the _rn product cannot be fused again)
// so the rounding does not depend on how ptxas contracts each kernel that inlines this.
__device__ __forceinline__ void rope_rotate_pair(float* z, size_t i, size_t half, float c, float s) {
  const float a = z[i], b = z[i + half];
  z[i] = fmaf(a, c, -__fmul_rn(b, s));
  z[i + half] = fmaf(a, s, __fmul_rn(b, c));
}

}  // namespace ds::cuda::detail
