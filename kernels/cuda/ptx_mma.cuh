// Inline PTX shared by the tensor-core kernels (gemm_tc.cu, attention_prefill_tc.cu, the chunked
// GDN's gdn_chunked_tc.cu / gdn_chunked_prep_tc.cu): async 16-byte copies into shared memory,
// ldmatrix fragment loads, the m16n8k16 bf16 and m16n8k8 tf32 MMAs with f32 accumulation, the
// m16n8k32 s8 MMA with s32 accumulation. All of
// it runs on sm_80 and later.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace ds::cuda::ptx {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; valid == false zero-fills the 16 bytes instead of reading.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
// 8 bytes global -> shared (both 8-byte aligned), through L1.
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// Two floats rounded to bf16 (nearest even) in one fragment register, lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// c (16x8 f32 fragment) += a (16x16 bf16, row) * b (16x8 bf16, col).
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

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

// d (16 x 8 s32) = a (16 x 32 s8, row) * b (32 x 8 s8, col) + c (every element of C is c).
// Fragments (g = lane / 4, t4 = lane % 4; byte i of a register is element i): a = {row g, k 4 t4
// .. + 3}, {row g + 8, same k}, {row g, k 16 + 4 t4 .. + 3}, {row g + 8, same k}; b = {k 4 t4 .. + 3
// of column g}, {k 16 + 4 t4 .. + 3 of column g}; d = (g, 2 t4), (g, 2 t4 + 1), (g + 8, 2 t4),
// (g + 8, 2 t4 + 1).
__device__ __forceinline__ void mma_s8(int* d, const uint32_t* a, uint32_t b0, uint32_t b1, int c) {
  asm(  // no side effects: the compiler may schedule it like arithmetic
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c));
}

}  // namespace ds::cuda::ptx
