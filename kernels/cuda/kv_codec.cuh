// Device side of the KV cache's element types (common/kv_format.h): typed row readers for the
// attention kernels, the per-type kernel dispatch, and the warp-level encoder and Hadamard
// rotation the KV writes use. The codecs are common/kv_format.h's (integer arithmetic), so the
// bytes written equal kernels/cpu/kv_codec.cpp's for the same floats.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/kv_format.h"

namespace ds::cuda::detail {

// The rows of one pool as a kernel reads them: value c of pool row r.
template <KvType T>
struct KvRead {
  const uint8_t* pool;
  size_t row_bytes, data_bytes;
  __device__ __forceinline__ float at(size_t row, size_t c) const {
    return kv_load<T>(pool + row * row_bytes, data_bytes, c);
  }
  // Values c0 .. c0+7 of pool row `row` (c0 a multiple of 8), each equal to at(row, c0 + e), in as
  // few loads as the 4-byte row alignment allows (rows start on 4-byte boundaries: kv_type_problem):
  // 16-bit types 4 words, byte types 2, q4r 1, plus one scale for block types (8 values never
  // straddle a 32-value block).
  __device__ __forceinline__ void at8(size_t row, size_t c0, float (&v)[8]) const {
    const uint8_t* r = pool + row * row_bytes;
    if constexpr (T == KvType::kF32) {
      const float* f = reinterpret_cast<const float*>(r) + c0;
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = f[e];
    } else if constexpr (T == KvType::kBf16 || T == KvType::kF16) {
      const uint32_t* w = reinterpret_cast<const uint32_t*>(r + 2 * c0);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t x = w[i];
        const uint16_t lo = static_cast<uint16_t>(x & 0xffffu), hi = static_cast<uint16_t>(x >> 16);
        v[2 * i] = T == KvType::kBf16 ? kv_decode_bf16(lo) : kv_decode_f16(lo);
        v[2 * i + 1] = T == KvType::kBf16 ? kv_decode_bf16(hi) : kv_decode_f16(hi);
      }
    } else if constexpr (T == KvType::kFp8 || T == KvType::kQ8_0) {
      const uint32_t* w = reinterpret_cast<const uint32_t*>(r + c0);
      float scale = 1.0f;
      if constexpr (T == KvType::kQ8_0) {
        scale = kv_decode_f16(*reinterpret_cast<const uint16_t*>(r + data_bytes + 2 * (c0 / kKvQuantBlock)));
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint32_t x = w[i];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const uint8_t byte = static_cast<uint8_t>(x >> (8 * b));
          if constexpr (T == KvType::kFp8) {
            v[4 * i + b] = kv_decode_fp8(byte);
          } else {
            v[4 * i + b] = static_cast<float>(static_cast<int8_t>(byte)) * scale;
          }
        }
      }
    } else {  // q4r: value 2i in the low nibble of byte i
      const uint32_t x = *reinterpret_cast<const uint32_t*>(r + c0 / 2);
      const float scale = kv_decode_f16(*reinterpret_cast<const uint16_t*>(r + data_bytes + 2 * (c0 / kKvQuantBlock)));
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = static_cast<float>(static_cast<int>((x >> (4 * e)) & 0xfu) - 8) * scale;
    }
  }
};

template <KvType T>
__host__ __device__ KvRead<T> kv_read(const void* pool, size_t row_values) {
  return KvRead<T>{static_cast<const uint8_t*>(pool), kv_row_bytes(T, row_values), kv_data_bytes(T, row_values)};
}

template <KvType T>
using KvTypeTag = std::integral_constant<KvType, T>;

// f(KvTypeTag<K>{}, KvTypeTag<V>{}) for the pools' types. The kernels are built for K and V of
// the same type (each pair is a kernel set); another pair is cudaErrorNotSupported.
template <typename F>
cudaError_t with_kv_types(KvType k, KvType v, F&& f) {
  if (k != v) return cudaErrorNotSupported;
  switch (k) {
    case KvType::kF32:
      return f(KvTypeTag<KvType::kF32>{}, KvTypeTag<KvType::kF32>{});
    case KvType::kBf16:
      return f(KvTypeTag<KvType::kBf16>{}, KvTypeTag<KvType::kBf16>{});
    case KvType::kF16:
      return f(KvTypeTag<KvType::kF16>{}, KvTypeTag<KvType::kF16>{});
    case KvType::kQ8_0:
      return f(KvTypeTag<KvType::kQ8_0>{}, KvTypeTag<KvType::kQ8_0>{});
    case KvType::kFp8:
      return f(KvTypeTag<KvType::kFp8>{}, KvTypeTag<KvType::kFp8>{});
    case KvType::kQ4r:
      return f(KvTypeTag<KvType::kQ4r>{}, KvTypeTag<KvType::kQ4r>{});
  }
  return cudaErrorInvalidValue;
}

__device__ __forceinline__ float kv_warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The warp's value of largest magnitude, the lowest lane's on ties (as the CPU's first-index scan).
__device__ __forceinline__ float kv_warp_signed_max(float x, unsigned lane) {
  float a = fabsf(x);
  int at = static_cast<int>(lane);
  for (int o = 16; o > 0; o /= 2) {
    const float oa = __shfl_xor_sync(0xffffffffu, a, o);
    const int oat = __shfl_xor_sync(0xffffffffu, at, o);
    if (oa > a || (oa == a && oat < at)) a = oa, at = oat;
  }
  return __shfl_sync(0xffffffffu, x, at);
}

// The whole warp encodes 32 consecutive values of a row (x: lane's value, element chunk * 32 +
// lane) into the row's bytes. Block types: the chunk is one scale block.
__device__ __forceinline__ void warp_encode_chunk(KvType t, float x, uint8_t* row, size_t data_bytes, size_t chunk,
                                                  unsigned lane) {
  const size_t i = chunk * kKvQuantBlock + lane;
  switch (t) {
    case KvType::kF32:
      reinterpret_cast<float*>(row)[i] = x;
      return;
    case KvType::kBf16:
      reinterpret_cast<uint16_t*>(row)[i] = kv_encode_bf16(x);
      return;
    case KvType::kF16:
      reinterpret_cast<uint16_t*>(row)[i] = kv_encode_f16(x);
      return;
    case KvType::kFp8:
      row[i] = kv_encode_fp8(x);
      return;
    case KvType::kQ8_0: {
      const uint16_t s16 = kv_block_scale(kv_warp_max(fabsf(x)), 127.0f);
      const int code = kv_block_code(x, kv_decode_f16(s16), 127);
      if (lane == 0) reinterpret_cast<uint16_t*>(row + data_bytes)[chunk] = s16;
      row[i] = static_cast<uint8_t>(static_cast<int8_t>(code));
      return;
    }
    case KvType::kQ4r: {
      const uint16_t s16 = kv_encode_f16(kv_warp_signed_max(x, lane) / -8.0f);
      const int code = kv_q4_code(x, kv_decode_f16(s16));
      if (lane == 0) reinterpret_cast<uint16_t*>(row + data_bytes)[chunk] = s16;
      const int hi = __shfl_down_sync(0xffffffffu, code, 1);
      if (lane % 2 == 0) row[i / 2] = static_cast<uint8_t>((code + 8) | ((hi + 8) << 4));
      return;
    }
  }
}

// The normalised Walsh-Hadamard rotation of one head held by a warp: lane holds values lane +
// 32 e for e < n_e (head_dim = 32 n_e, a power of two). Butterfly strides 1, 2, 4, ... as
// kernels/cpu/kv_codec.cpp's hadamard_heads, the same adds and subtracts, then `inv` =
// 1/sqrt(head_dim) computed on the host: the same bits.
template <int kMaxE>
__device__ __forceinline__ void warp_hadamard(float (&v)[kMaxE], int n_e, unsigned lane, float inv) {
  for (unsigned len = 1; len < kKvQuantBlock; len *= 2) {
#pragma unroll
    for (int e = 0; e < kMaxE; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, v[e], len);
      if (e < n_e) v[e] = (lane & len) ? other - v[e] : v[e] + other;
    }
  }
#pragma unroll
  for (int len = 1; len < kMaxE; len *= 2) {  // compile-time strides keep v in registers
    if (len >= n_e) break;
#pragma unroll
    for (int e = 0; e + len < kMaxE; ++e) {
      if (e + len >= n_e || (e & len) != 0) continue;
      const float a = v[e], b = v[e + len];
      v[e] = a + b;
      v[e + len] = a - b;
    }
  }
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) v[e] *= inv;
}

}  // namespace ds::cuda::detail
