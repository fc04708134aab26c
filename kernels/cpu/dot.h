// Internal helper of the CPU ops (not part of the public contract): f32 dot products with a
// fixed summation order, written with GCC vector extensions (4-float vectors) so they vectorize without
// -ffast-math (each lane is an independent scalar accumulator; nothing is reassociated).
//
// Element i (i < n rounded down to 8) is added to lane i % 8 in increasing i; the tail element
// n8 + l is added to lane l; the 8 lanes are then summed pairwise. Every op that needs "the" dot
// product of two f32 rows uses these functions, so results do not depend on how many rows or
// tokens are processed together, nor on the thread count.
#pragma once

#include <cstddef>
#include <cstring>

namespace ds::cpu::detail {

inline constexpr size_t kDotLanes = 8;
// Lanes 0-3 and 4-7 are kept in two SSE-sized vectors (16 bytes: no ABI questions).
typedef float Quad __attribute__((vector_size(4 * sizeof(float))));

inline Quad load4(const float* p) {
  Quad v;
  std::memcpy(&v, p, sizeof(v));  // unaligned load
  return v;
}

inline float reduce_lanes(Quad lo, Quad hi) {
  return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
}

// Adds a[i] * b[i] for the tail i in [n8, n) to lane i - n8.
inline void add_tail(const float* a, const float* b, size_t n8, size_t n, Quad& lo, Quad& hi) {
  for (size_t i = n8; i < n; ++i) {
    const size_t l = i - n8;
    if (l < 4)
      lo[l] += a[i] * b[i];
    else
      hi[l - 4] += a[i] * b[i];
  }
}

inline float dot(const float* a, const float* b, size_t n) {
  Quad lo = {}, hi = {};
  const size_t n8 = n / kDotLanes * kDotLanes;
  for (size_t i = 0; i < n8; i += kDotLanes) {
    lo += load4(a + i) * load4(b + i);
    hi += load4(a + i + 4) * load4(b + i + 4);
  }
  add_tail(a, b, n8, n, lo, hi);
  return reduce_lanes(lo, hi);
}

// out[r] = dot(w + r*w_stride, x, n) for r < 4, sharing the loads of x. Bit-identical to dot().
inline void dot4(const float* w, size_t w_stride, const float* x, size_t n, float* out) {
  const float* w0 = w;
  const float* w1 = w + w_stride;
  const float* w2 = w + 2 * w_stride;
  const float* w3 = w + 3 * w_stride;
  Quad lo0 = {}, hi0 = {}, lo1 = {}, hi1 = {}, lo2 = {}, hi2 = {}, lo3 = {}, hi3 = {};
  const size_t n8 = n / kDotLanes * kDotLanes;
  for (size_t i = 0; i < n8; i += kDotLanes) {
    const Quad xlo = load4(x + i), xhi = load4(x + i + 4);
    lo0 += load4(w0 + i) * xlo;
    hi0 += load4(w0 + i + 4) * xhi;
    lo1 += load4(w1 + i) * xlo;
    hi1 += load4(w1 + i + 4) * xhi;
    lo2 += load4(w2 + i) * xlo;
    hi2 += load4(w2 + i + 4) * xhi;
    lo3 += load4(w3 + i) * xlo;
    hi3 += load4(w3 + i + 4) * xhi;
  }
  add_tail(w0, x, n8, n, lo0, hi0);
  add_tail(w1, x, n8, n, lo1, hi1);
  add_tail(w2, x, n8, n, lo2, hi2);
  add_tail(w3, x, n8, n, lo3, hi3);
  out[0] = reduce_lanes(lo0, hi0);
  out[1] = reduce_lanes(lo1, hi1);
  out[2] = reduce_lanes(lo2, hi2);
  out[3] = reduce_lanes(lo3, hi3);
}

}  // namespace ds::cpu::detail
