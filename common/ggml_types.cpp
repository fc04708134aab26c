#include "common/ggml_types.h"

#include <cmath>
#include <cstring>

#include "common/error.h"

namespace ds {
namespace {

struct TypeEntry {
  uint32_t id;
  GgmlTypeTraits traits;
};

constexpr TypeEntry kTypes[] = {
    {0, {"F32", 1, 4, true}},        {1, {"F16", 1, 2, true}},        {2, {"Q4_0", 32, 18, false}},
    {3, {"Q4_1", 32, 20, false}},    {6, {"Q5_0", 32, 22, false}},    {7, {"Q5_1", 32, 24, false}},
    {8, {"Q8_0", 32, 34, true}},     {9, {"Q8_1", 32, 36, false}},    {10, {"Q2_K", 256, 84, false}},
    {11, {"Q3_K", 256, 110, false}}, {12, {"Q4_K", 256, 144, true}},  {13, {"Q5_K", 256, 176, false}},
    {14, {"Q6_K", 256, 210, true}},  {15, {"Q8_K", 256, 292, false}}, {24, {"I8", 1, 1, false}},
    {25, {"I16", 1, 2, false}},      {26, {"I32", 1, 4, false}},      {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},      {30, {"BF16", 1, 2, true}},
};

void dequant_q8_0(const uint8_t* src, float* dst, size_t n_blocks) {
  for (size_t b = 0; b < n_blocks; ++b) {
    BlockQ8_0 blk;
    std::memcpy(&blk, src + b * sizeof(BlockQ8_0), sizeof(blk));
    const float d = fp16_to_fp32(blk.d);
    for (int i = 0; i < 32; ++i) dst[b * 32 + i] = d * static_cast<float>(blk.qs[i]);
  }
}

// 6-bit scale and min of sub-block j of a Q4_K super-block (spec §12.2).
void q4k_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

void dequant_q4_k(const uint8_t* src, float* dst, size_t n_blocks) {
  for (size_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = src + b * 144;
    uint16_t dh, dminh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&dminh, blk + 2, 2);
    const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(dminh);
    const uint8_t* scales = blk + 4;
    const uint8_t* qs = blk + 16;
    float* y = dst + b * 256;
    for (int g = 0; g < 4; ++g) {
      uint8_t sc0, m0, sc1, m1;
      q4k_scale_min(2 * g, scales, &sc0, &m0);
      q4k_scale_min(2 * g + 1, scales, &sc1, &m1);
      for (int l = 0; l < 32; ++l) {
        y[64 * g + l] = d * sc0 * (qs[32 * g + l] & 0xF) - dmin * m0;
        y[64 * g + 32 + l] = d * sc1 * (qs[32 * g + l] >> 4) - dmin * m1;
      }
    }
  }
}

void dequant_q6_k(const uint8_t* src, float* dst, size_t n_blocks) {
  for (size_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = src + b * 210;
    uint16_t dh;
    std::memcpy(&dh, blk + 208, 2);
    const float d = fp16_to_fp32(dh);
    float* y = dst + b * 256;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = blk + 64 * half;
      const uint8_t* qh = blk + 128 + 32 * half;
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192 + 8 * half);
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q1 = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
        const int q2 = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
        const int q3 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
        const int q4 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        y[128 * half + l] = d * sc[s] * (q1 - 32);
        y[128 * half + l + 32] = d * sc[s + 2] * (q2 - 32);
        y[128 * half + l + 64] = d * sc[s + 4] * (q3 - 32);
        y[128 * half + l + 96] = d * sc[s + 6] * (q4 - 32);
      }
    }
  }
}

}  // namespace

bool ggml_type_traits(uint32_t type_id, GgmlTypeTraits* out) {
  for (const auto& e : kTypes) {
    if (e.id == type_id) {
      *out = e.traits;
      return true;
    }
  }
  return false;
}

const char* ggml_type_name(GgmlType type) {
  if (type == GgmlType::Q8_0_SPLIT) return "Q8_0_SPLIT";
  GgmlTypeTraits t;
  return ggml_type_traits(static_cast<uint32_t>(type), &t) ? t.name : "unknown";
}

size_t ggml_row_bytes(GgmlType type, uint64_t ne0) {
  if (type == GgmlType::Q8_0_SPLIT) type = GgmlType::Q8_0;  // same bytes, other order
  GgmlTypeTraits t;
  if (!ggml_type_traits(static_cast<uint32_t>(type), &t)) {
    throw FormatError("unknown ggml type id " + std::to_string(static_cast<uint32_t>(type)));
  }
  if (ne0 % t.block_elems != 0) {
    throw FormatError(std::string("row of ") + std::to_string(ne0) + " elements is not a multiple of the " + t.name +
                      " block size " + std::to_string(t.block_elems));
  }
  return static_cast<size_t>(ne0 / t.block_elems) * t.block_bytes;
}

void dequantize_row(GgmlType type, const void* src, float* dst, size_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, s, n * 4);
      return;
    case GgmlType::F16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = fp16_to_fp32(h);
      }
      return;
    case GgmlType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
      }
      return;
    case GgmlType::Q8_0:
      dequant_q8_0(s, dst, n / 32);
      return;
    case GgmlType::Q4_K:
      dequant_q4_k(s, dst, n / 256);
      return;
    case GgmlType::Q6_K:
      dequant_q6_k(s, dst, n / 256);
      return;
    default:
      throw FormatError(std::string("no dequantizer for ggml type ") + ggml_type_name(type));
  }
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t fp32_to_fp16(float f) {
  // IEEE binary32 -> binary16, round to nearest even; overflow -> inf, NaN kept quiet.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00);   // NaN
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00);  // >= 65536: inf
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    // value = abs_f * 2^24 rounded to an integer mantissa (nearest even via float math)
    float af;
    std::memcpy(&af, &abs, 4);
    const float scaled = af * 16777216.0f;  // exact: power-of-two scaling
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t exp = (abs >> 23) - 112;
  const uint32_t mant = abs & 0x7FFFFF;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // may carry into the exponent: correct
  return static_cast<uint16_t>(sign | h);
}

uint16_t fp32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  const uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

}  // namespace ds
