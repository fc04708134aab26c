// Internal: reading GGUF weight rows on the device (Q8_0 / F16 / BF16 / F32, and Q8_0 in the
// split device layout, common/q8_split.h), dequantized to f32 exactly as kernels/cpu/matmul.cpp
// does (the products d * q and the half/bf16 widenings are exact, so both sides see bit-identical
// weights). Row r of a matrix starts at data + r*row_bytes; every reader also gets the row's
// column count `cols` (the split layout's scales start at row + cols; the others ignore it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/ggml_types.h"

namespace ds::cuda::detail {

inline constexpr size_t kQ8Block = 32;       // elements per Q8_0 block
inline constexpr size_t kQ8BlockBytes = 34;  // fp16 scale + 32 int8

__device__ __forceinline__ float half_bits_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(uint32_t{b} << 16);
}

__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

// Two int8 quants (the low 16 bits of `pair`, first quant lowest) times the block scale d, each
// rounded to bf16 (nearest even): the one rounding every Q8_0 -> bf16 path shares (dequant v1,
// v2 and split rows), so all of them produce identical GEMM operands.
__device__ __forceinline__ __nv_bfloat162 q8_pair_to_bf16(float d, uint32_t pair) {
  return __floats2bfloat162_rn(d * static_cast<float>(static_cast<int8_t>(pair & 0xFFu)),
                               d * static_cast<float>(static_cast<int8_t>((pair >> 8) & 0xFFu)));
}

// One GGUF-order Q8_0 block (34 bytes at `blk`, 2-byte aligned) as 32 bf16 in four 16-byte words.
__device__ __forceinline__ void q8_block_to_bf16(const uint8_t* blk, uint4 (&packed)[4]) {
  const float d = half_bits_to_float(load_u16(blk));
  auto* h = reinterpret_cast<__nv_bfloat162*>(packed);
#pragma unroll
  for (int j = 0; j < 16; ++j) h[j] = q8_pair_to_bf16(d, load_u16(blk + 2 + 2 * j));
}

// Four int8 quants in a word -> four exact floats: bias to unsigned, place each byte in the
// mantissa of 2^23 (PRMT), subtract 2^23 + 128 (FADD). Cheaper than the quarter-rate I2F (the
// decode GEMVs, gemv_q8.cu and gemv_q8_split.cu).
__device__ __forceinline__ void widen_int8x4(uint32_t w, float* f) {
  const uint32_t u = w ^ 0x80808080u;
#pragma unroll
  for (int k = 0; k < 4; ++k) f[k] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u + k)) - 8388736.0f;
}

template <GgmlType T>
struct WeightRow;

template <>
struct WeightRow<GgmlType::F32> {
  __device__ static float one(const uint8_t* row, size_t c, size_t /*cols*/) {
    return reinterpret_cast<const float*>(row)[c];
  }
  // Eight consecutive weights from column c (c % 8 == 0, c + 8 <= cols).
  __device__ static void eight(const uint8_t* row, size_t c, size_t /*cols*/, float* out) {
    const float* p = reinterpret_cast<const float*>(row) + c;
    if (reinterpret_cast<uintptr_t>(p) % 16 == 0) {
      const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
      out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = p[j];
    }
  }
};

// F16 and BF16 share the layout; only the widening differs.
struct WidenF16 {
  __device__ static float f(uint16_t h) { return half_bits_to_float(h); }
};
struct WidenBF16 {
  __device__ static float f(uint16_t b) { return bf16_bits_to_float(b); }
};

template <class Widen>
struct Half16Row {
  __device__ static float one(const uint8_t* row, size_t c, size_t /*cols*/) { return Widen::f(load_u16(row + 2 * c)); }
  __device__ static void eight(const uint8_t* row, size_t c, size_t /*cols*/, float* out) {
    const uint8_t* p = row + 2 * c;
    if (reinterpret_cast<uintptr_t>(p) % 16 == 0) {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[2 * j] = Widen::f(static_cast<uint16_t>(w[j] & 0xFFFFu));
        out[2 * j + 1] = Widen::f(static_cast<uint16_t>(w[j] >> 16));
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = Widen::f(load_u16(p + 2 * j));
    }
  }
};

template <>
struct WeightRow<GgmlType::F16> : Half16Row<WidenF16> {};
template <>
struct WeightRow<GgmlType::BF16> : Half16Row<WidenBF16> {};

// Q8_0 blocks are 34 bytes, so only 2-byte alignment is guaranteed: read the quants as u16 pairs.
template <>
struct WeightRow<GgmlType::Q8_0> {
  __device__ static float one(const uint8_t* row, size_t c, size_t /*cols*/) {
    const uint8_t* blk = row + (c / kQ8Block) * kQ8BlockBytes;
    const float d = half_bits_to_float(load_u16(blk));
    return d * static_cast<float>(static_cast<int8_t>(blk[2 + c % kQ8Block]));
  }
  __device__ static void eight(const uint8_t* row, size_t c, size_t /*cols*/, float* out) {
    const uint8_t* blk = row + (c / kQ8Block) * kQ8BlockBytes;
    const float d = half_bits_to_float(load_u16(blk));
    const uint8_t* q = blk + 2 + c % kQ8Block;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint16_t pair = load_u16(q + 2 * j);
      out[2 * j] = d * static_cast<float>(static_cast<int8_t>(pair & 0xFFu));
      out[2 * j + 1] = d * static_cast<float>(static_cast<int8_t>(pair >> 8));
    }
  }
};

// Split rows (common/q8_split.h): quants q[0..cols) then fp16 scales d[0..cols/32). The same
// products d * q as WeightRow<Q8_0>, so every kernel built on WeightRow gives identical bits for
// either layout. Rows are 16-byte aligned (weight_alignment), so 8 quants are one 8-byte load.
template <>
struct WeightRow<GgmlType::Q8_0_SPLIT> {
  __device__ static float one(const uint8_t* row, size_t c, size_t cols) {
    const float d = half_bits_to_float(load_u16(row + cols + 2 * (c / kQ8Block)));
    return d * static_cast<float>(static_cast<int8_t>(row[c]));
  }
  __device__ static void eight(const uint8_t* row, size_t c, size_t cols, float* out) {
    const float d = half_bits_to_float(load_u16(row + cols + 2 * (c / kQ8Block)));
    const uint2 u = *reinterpret_cast<const uint2*>(row + c);
    const uint32_t w[2] = {u.x, u.y};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      out[j] = d * static_cast<float>(static_cast<int8_t>((w[j / 4] >> (8 * (j % 4))) & 0xFFu));
    }
  }
};

// Host-side: either Q8_0 layout (both need cols % 32 == 0).
inline bool is_q8_0(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q8_0_SPLIT;
}

// Host-side: the weight types the device kernels read, and the alignment their rows need (split
// rows: 16 bytes, for the vector loads of their quants; the backend's allocations give 256).
inline bool weight_type_supported(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || is_q8_0(t);
}
inline size_t weight_alignment(GgmlType t) {
  if (t == GgmlType::Q8_0_SPLIT) return 16;
  return t == GgmlType::F32 ? 4 : 2;
}

}  // namespace ds::cuda::detail
