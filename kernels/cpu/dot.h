// Internal helper of the CPU ops (not part of the public contract): f32 dot products with a
// fixed summation order that GCC vectorizes without -ffast-math.
//
// Element i is added to lane i % kDotLanes (in increasing i); the lanes are then summed pairwise.
// Every caller that needs "the" dot product of two f32 rows uses these functions, so results do
// not depend on how many rows or tokens are processed together, nor on the thread count.
#pragma once

#include <cstddef>

namespace ds::cpu::detail {

inline constexpr size_t kDotLanes = 8;

inline float reduce_lanes(const float* acc) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

inline float dot(const float* a, const float* b, size_t n) {
  float acc[kDotLanes] = {};
  size_t i = 0;
  for (; i + kDotLanes <= n; i += kDotLanes) {
    for (size_t l = 0; l < kDotLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (size_t l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return reduce_lanes(acc);
}

// out[r] = dot(w + r*w_stride, x, n) for r < 4, sharing the loads of x. Bit-identical to dot().
inline void dot4(const float* w, size_t w_stride, const float* x, size_t n, float* out) {
  float acc0[kDotLanes] = {}, acc1[kDotLanes] = {}, acc2[kDotLanes] = {}, acc3[kDotLanes] = {};
  const float* w0 = w;
  const float* w1 = w + w_stride;
  const float* w2 = w + 2 * w_stride;
  const float* w3 = w + 3 * w_stride;
  size_t i = 0;
  for (; i + kDotLanes <= n; i += kDotLanes) {
    for (size_t l = 0; l < kDotLanes; ++l) {
      const float xv = x[i + l];
      acc0[l] += w0[i + l] * xv;
      acc1[l] += w1[i + l] * xv;
      acc2[l] += w2[i + l] * xv;
      acc3[l] += w3[i + l] * xv;
    }
  }
  for (size_t l = 0; i < n; ++i, ++l) {
    acc0[l] += w0[i] * x[i];
    acc1[l] += w1[i] * x[i];
    acc2[l] += w2[i] * x[i];
    acc3[l] += w3[i] * x[i];
  }
  out[0] = reduce_lanes(acc0);
  out[1] = reduce_lanes(acc1);
  out[2] = reduce_lanes(acc2);
  out[3] = reduce_lanes(acc3);
}

}  // namespace ds::cpu::detail
