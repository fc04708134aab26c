// Internal: the bf16 A fragments of a Q8_0 weight span for mma.sync m16n8k16, shared by the
// small-batch GEMM over split rows (gemm_q8_split_small_kernels.cuh) and the MoE grouped products
// (moe_gemm_tc.cu): both widen the quants to bf16 in registers, so neither stages bf16 weights.
#pragma once

#include <cstdint>

#include "kernels/cuda/ptx_mma.cuh"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {

// The lane's share of one span: 16 quants and the block scale of each of its 4 rows (rows g,
// g + 8 of m tile 0, then of m tile 1).
struct SpanWeights {
  uint4 q[4];
  uint16_t d[4];
};

// A fragments of the span: a[mt][ks] = {row g lo, row g+8 lo, row g hi, row g+8 hi} of m tile mt
// (rows i = 2 mt, 2 mt + 1 of the SpanWeights); lo / hi: columns 16c + 4ks + {0,1} / {2,3}. Each
// value is bf16(d * q), rounded exactly like q8_pair_to_bf16 (d * q is exact in f32).
__device__ __forceinline__ void span_fragments(const SpanWeights& s, uint32_t (&a)[2][4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int mt = i / 2, which = i % 2;
    const float d = half_bits_to_float(s.d[i]);
    const uint32_t words[4] = {s.q[i].x, s.q[i].y, s.q[i].z, s.q[i].w};
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      float f[4];
      widen_int8x4(words[ks], f);
      a[mt][ks][which] = ptx::pack_bf16(d * f[0], d * f[1]);
      a[mt][ks][2 + which] = ptx::pack_bf16(d * f[2], d * f[3]);
    }
  }
}

}  // namespace ds::cuda::detail
