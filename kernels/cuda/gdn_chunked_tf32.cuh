// tf32 tensor-core pieces of the chunked GDN prefill (gdn_chunked_tc.cu: the state pass;
// gdn_chunked_prep_tc.cu: the prep): f32 -> tf32 rounding and the m16n8k8 tf32 mma.sync with f32
// accumulation (sm_80 and later). Not a public header.
#pragma once

#include <cstdint>

namespace ds::cuda::gdn_chunked_detail {

// Round to nearest (ties away from zero) to tf32: 10 mantissa bits, 2^-11 relative error.
__device__ __forceinline__ uint32_t tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// c (16x8 f32) += a (16x8 tf32, row) * b (8x8 tf32, col). Fragments (g = lane / 4, qd = lane % 4):
// a = {(g, qd), (g + 8, qd), (g, qd + 4), (g + 8, qd + 4)}, b = {(qd, g), (qd + 4, g)},
// c = {(g, 2qd), (g, 2qd + 1), (g + 8, 2qd), (g + 8, 2qd + 1)}.
__device__ __forceinline__ void mma_tf32(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace ds::cuda::gdn_chunked_detail
