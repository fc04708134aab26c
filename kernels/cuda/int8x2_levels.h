// The int8 activation representation of the split-rows decode GEMV on int8 tensor cores
// (gemv_q8_split_mma.cu): per 32-column block an f32 scale u and per column an integer
// Q = 254 a + b split into two int8 levels, so that x ~= u Q with |x - u Q| < 2^-15.98 max|x_block|
// + 2^-134. Proof (m = max |x| over the block, kQMax = 127 * 254 + 127 = 32385, u = fl(m / kQMax),
// Q = rint(fl(x / u))):
//   x / u <= m / u <= kQMax (1 + 2^-23), so fl(x / u) <= 32385.004 and rint never leaves the
//   range (the clamp in quantize is a guard only); |fl(x/u) - x/u| <= 2^-24 |x/u| <= 0.002, hence
//   |Q - x/u| <= 0.502 and |x - u Q| <= 0.502 u <= 0.502 m (1 + 2^-24) / 32385 < 2^-15.98 m.
//   When u is subnormal or 0 the stored u is still what the products use, so the same argument
//   holds with an absolute term: |x - u Q| <= 2^-15.98 m + 2^-134 always.
// a = Q split base 254: a = sign(Q) floor((|Q| + 126) / 254), b = Q - 254 a, so |a| <= 127 and
// |b| <= 127. A non-finite block gets u = NaN (its products are NaN, never a finite answer); an
// all-zero block u = 0.
// The functions are shared by the device code and the CPU reference (reference_levels), which
// the tests hold to the same bits: IEEE division, rint (nearest even), min / max and integer
// arithmetic give identical results on both sides.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define DS_INT8X2_FN __host__ __device__ __forceinline__
#else
#define DS_INT8X2_FN inline
#endif

namespace ds::cuda::int8x2 {

inline constexpr int kQMax = 127 * 254 + 127;  // |Q| <= kQMax; a, b in [-127, 127]
inline constexpr int kBlock = 32;              // columns per scale (one Q8_0 block)

// The block's scale from its max |x| (finite): u = m / kQMax, rounded once.
DS_INT8X2_FN float block_scale(float max_abs) {
  return max_abs / static_cast<float>(kQMax);
}

// Q = rint(v / u) (the clamp is a guard: v / u never exceeds kQMax + 0.004); 0 when u is 0.
DS_INT8X2_FN int quantize(float v, float u) {
  if (!(u > 0.0f)) return 0;
  const float k = static_cast<float>(kQMax);
  return static_cast<int>(fminf(fmaxf(rintf(v / u), -k), k));
}

// Q -> (a, b) with Q = 254 a + b: a = sign(Q) floor((|Q| + 126) / 254), so |a| <= 127 and
// b = Q - 254 a lies in [-127, 127].
DS_INT8X2_FN void split_levels(int q, int8_t& a, int8_t& b) {
  const int mag = q < 0 ? -q : q;
  const int hi = (mag + 126) / 254;
  const int ai = q < 0 ? -hi : hi;
  a = static_cast<int8_t>(ai);
  b = static_cast<int8_t>(q - 254 * ai);
}

// CPU reference of the representation: x [n][xs] -> levels [2][n][cols]
// (level a of every token, then level b), scales [n][cols / 32]; a block holding a non-finite
// value gets u = NaN and zero levels.
inline void reference_levels(const float* x, size_t xs, size_t n, size_t cols, int8_t* levels, float* scales) {
  for (size_t t = 0; t < n; ++t) {
    for (size_t blk = 0; blk < cols / kBlock; ++blk) {
      const float* v = x + t * xs + blk * kBlock;
      bool finite = true;
      float m = 0.0f;
      for (int i = 0; i < kBlock; ++i) {
        finite = finite && std::isfinite(v[i]);
        m = std::fmax(m, std::fabs(v[i]));
      }
      const float u = finite ? block_scale(m) : std::numeric_limits<float>::quiet_NaN();
      for (int i = 0; i < kBlock; ++i) {
        const size_t c = t * cols + blk * kBlock + i;
        split_levels(finite ? quantize(v[i], u) : 0, levels[c], levels[n * cols + c]);
      }
      scales[t * (cols / kBlock) + blk] = u;
    }
  }
}

}  // namespace ds::cuda::int8x2
