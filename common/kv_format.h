// The KV cache's element types and their row format: what a pool row of one layer's K (or V) for
// one token holds, shared by the coordinator (flags, capacity), the CPU attention (the reference)
// and the CUDA kernels (the same codecs, so CPU and CUDA write the same bytes).
//
// A row is n = n_kv_heads * head_dim values. Its bytes, by type:
//   f32   n floats
//   bf16  n bfloat16 (round to nearest even)
//   f16   n IEEE half (round to nearest even, saturating to +-65504)
//   fp8   n e4m3 codes (round to nearest even, saturating to +-448; no scale, as vLLM's default)
//   q8_0  n int8, then n/32 f16 scales: value = q * scale; scale = f16(amax / 127) of the 32-value
//         block, q = round(x / scale) (llama.cpp's q8_0, stored data-then-scales per row)
//   q4r   n/2 bytes of 4-bit codes (value 2i in the low nibble of byte i), then n/32 f16 scales:
//         value = (code - 8) * scale, scale = f16(m / -8) with m the block's value of largest
//         magnitude (the first on ties), q = code - 8 in [-8, 7]: llama.cpp q4_0's 16 levels (m
//         itself is exact; measured KL 17% below a symmetric [-7, 7]). The values are those of
//         each head after a normalised Walsh-Hadamard rotation (hadamard_heads): attention reads
//         rotated keys with rotated queries (q.k is unchanged) and rotates its output back.
// Quantisation happens when a row is written (kv_encode_*), never when it is read.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define DS_KV_HD __host__ __device__ __forceinline__
#else
#define DS_KV_HD inline
#endif

namespace ds {

enum class KvType : uint8_t { kF32 = 0, kBf16 = 1, kF16 = 2, kQ8_0 = 3, kFp8 = 4, kQ4r = 5 };

constexpr size_t kKvQuantBlock = 32;  // values per scale of q8_0 and q4r

inline constexpr const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32:
      return "f32";
    case KvType::kBf16:
      return "bf16";
    case KvType::kF16:
      return "f16";
    case KvType::kQ8_0:
      return "q8_0";
    case KvType::kFp8:
      return "fp8";
    case KvType::kQ4r:
      return "q4r";
  }
  return "?";
}

inline std::optional<KvType> parse_kv_type(std::string_view s) {
  for (KvType t : {KvType::kF32, KvType::kBf16, KvType::kF16, KvType::kQ8_0, KvType::kFp8, KvType::kQ4r}) {
    if (s == kv_type_name(t)) return t;
  }
  return std::nullopt;
}

inline constexpr const char* kKvTypeNames = "f32, bf16, f16, q8_0, fp8, q4r";
// The serving default (serve, workers, bench): the smallest type whose KL divergence against the
// f32 path stays <= 0.001 on the trained small-qwen35 on both backends (docs/PERFORMANCE.md, KV
// cache types: fp8 1.2e-4 - 5.5e-4; q4r crosses it on CUDA). Exact tools (logits, perplexity)
// keep f32 (KvTypeFlags::fallback).
constexpr KvType kDefaultKvType = KvType::kFp8;

constexpr bool kv_type_has_scales(KvType t) {
  return t == KvType::kQ8_0 || t == KvType::kQ4r;
}
// Whether attention must rotate queries in and outputs out (q4r's heads are stored rotated).
constexpr bool kv_type_rotated(KvType t) {
  return t == KvType::kQ4r;
}

// Bytes of a row's values (before its scales) and of the whole row.
constexpr size_t kv_data_bytes(KvType t, size_t n) {
  switch (t) {
    case KvType::kF32:
      return 4 * n;
    case KvType::kBf16:
    case KvType::kF16:
      return 2 * n;
    case KvType::kQ8_0:
    case KvType::kFp8:
      return n;
    case KvType::kQ4r:
      return n / 2;
  }
  return 0;
}
constexpr size_t kv_row_bytes(KvType t, size_t n) {
  return kv_data_bytes(t, n) + (kv_type_has_scales(t) ? 2 * (n / kKvQuantBlock) : 0);
}

// Why rows of n values with heads of head_dim cannot use type t, or nullptr: block types need
// whole 32-value blocks per head, q4r a power-of-two head (the rotation), every row a whole
// number of floats (the pools are float allocations; f32 rows also need n % 4 for the tiled
// prefill's float4 loads, which its own check asks).
constexpr const char* kv_type_problem(KvType t, size_t head_dim, size_t n) {
  if (kv_type_has_scales(t) && head_dim % kKvQuantBlock != 0) return "needs head_dim a multiple of 32";
  if (kv_type_rotated(t) && (head_dim & (head_dim - 1)) != 0) return "needs a power-of-two head_dim (rotation)";
  if (kv_row_bytes(t, n) % 4 != 0) return "needs rows of a multiple of 4 bytes";
  return nullptr;
}

// ---- scalar codecs (host and device; integer arithmetic, so both write the same bits) -----------

DS_KV_HD uint32_t kv_f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
DS_KV_HD float kv_bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

DS_KV_HD uint16_t kv_encode_bf16(float x) {
  const uint32_t u = kv_f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
DS_KV_HD float kv_decode_bf16(uint16_t h) {
  return kv_bits_f32(uint32_t{h} << 16);
}

// IEEE binary16, round to nearest even; finite values beyond the range saturate (a KV value that
// large is already garbage; an infinity would turn the softmax into NaN).
DS_KV_HD uint16_t kv_encode_f16(float x) {
  const uint32_t u = kv_f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7bffu);  // rounds to >= 65520: saturate
  if (a < 0x38800000u) {                                               // below 2^-14: subnormal or zero
    if (a < 0x33000000u) return sign;                                  // below half the smallest subnormal
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(a >> 23);  // 14..24 for 2^-25 <= |x| < 2^-14
    const uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    return static_cast<uint16_t>(sign | (q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u)));
  }
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round the 13 dropped bits to nearest even
  return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
}
DS_KV_HD float kv_decode_f16(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));  // the conversion is exact: the same value as below
#endif
  const uint32_t sign = uint32_t{h & 0x8000u} << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (e == 31) return kv_bits_f32(sign | 0x7f800000u | (m << 13));
  return kv_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

// OCP e4m3 (bias 7, no infinities, 0x7f = NaN), round to nearest even, saturating to 448.
DS_KV_HD uint8_t kv_encode_fp8(float x) {
  const uint32_t u = kv_f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // >= 448 (and inf): saturate
  if (a < 0x3c800000u) {                                           // below 2^-6: subnormal steps of 2^-9
    const float q = kv_bits_f32(a) * 512.0f;                       // exact (power of two)
    const uint32_t n = static_cast<uint32_t>(q), rem_up = q - static_cast<float>(n) > 0.5f ? 1u : 0u;
    const bool tie = q - static_cast<float>(n) == 0.5f;
    return static_cast<uint8_t>(sign | (n + (rem_up || (tie && (n & 1u)) ? 1u : 0u)));
  }
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);  // round the 20 dropped bits to nearest even
  const uint32_t code = (r - 0x3c000000u) >> 20;       // rebias 127 -> 7
  return static_cast<uint8_t>(sign | (code > 0x7e ? 0x7e : code));
}
DS_KV_HD float kv_decode_fp8(uint8_t c) {
#if defined(__CUDA_ARCH__)
  // exact, e4m3 -> f16 -> f32 (NaN stays NaN), the same value as below
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3)));
#endif
  const uint32_t sign = uint32_t{c & 0x80u} << 24, e = (c >> 3) & 0xfu, m = c & 7u;
  if (e == 0) {
    const float v = static_cast<float>(m) * 0.001953125f;  // m * 2^-9
    return sign ? -v : v;
  }
  if (e == 15 && m == 7) return kv_bits_f32(0x7fc00000u);
  return kv_bits_f32(sign | ((e + 120) << 23) | (m << 20));
}

// The scale of a block whose largest magnitude is amax, for `levels` steps each side (127 or 7),
// as stored (f16), and the code of x under it (round half away from zero, clamped). A zero block
// has scale 0 and codes 0.
DS_KV_HD uint16_t kv_block_scale(float amax, float levels) {
  return kv_encode_f16(amax / levels);
}
DS_KV_HD int kv_block_code(float x, float scale, int levels) {
  if (scale == 0.0f) return 0;
  const int q = static_cast<int>(roundf(x / scale));
  return q > levels ? levels : (q < -levels ? -levels : q);
}

// q4r's code of x under `scale` (= f16(m / -8)): round half away from zero, clamped to [-8, 7].
DS_KV_HD int kv_q4_code(float x, float scale) {
  if (scale == 0.0f) return 0;
  const int q = static_cast<int>(roundf(x / scale));
  return q > 7 ? 7 : (q < -8 ? -8 : q);
}

// The U at `p`, which is aligned to sizeof(U): every row starts on a 4-byte boundary (pools are
// float allocations, rows a multiple of 4 bytes: kv_type_problem) and its values and scales sit
// at multiples of their size. On the device a memcpy from a byte pointer compiles to one byte
// load per byte (4 for an f32 value, 2 for a scale), which made f32 KV reads 4x the load
// instructions of fp8; the typed load is one instruction. The host's memcpy is one load already.
template <typename U>
DS_KV_HD U kv_load_aligned(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const U*>(p);
#else
  U v;
  memcpy(&v, p, sizeof(U));
  return v;
#endif
}

// Value c of a row of type T (the rows' bytes at `row`; data_bytes = kv_data_bytes(T, n)).
template <KvType T>
DS_KV_HD float kv_load(const uint8_t* row, size_t data_bytes, size_t c) {
  if constexpr (T == KvType::kF32) {
    return kv_load_aligned<float>(row + 4 * c);
  } else if constexpr (T == KvType::kBf16) {
    return kv_decode_bf16(kv_load_aligned<uint16_t>(row + 2 * c));
  } else if constexpr (T == KvType::kF16) {
    return kv_decode_f16(kv_load_aligned<uint16_t>(row + 2 * c));
  } else if constexpr (T == KvType::kFp8) {
    return kv_decode_fp8(row[c]);
  } else {
    const float scale = kv_decode_f16(kv_load_aligned<uint16_t>(row + data_bytes + 2 * (c / kKvQuantBlock)));
    if constexpr (T == KvType::kQ8_0) {
      return static_cast<float>(static_cast<int8_t>(row[c])) * scale;
    } else {
      const int code = (row[c / 2] >> (4 * (c % 2))) & 0xf;
      return static_cast<float>(code - 8) * scale;
    }
  }
}

}  // namespace ds
