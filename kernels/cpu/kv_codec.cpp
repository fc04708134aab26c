#include "kernels/cpu/kv_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ds::cpu {
namespace {

// A block type's 32-value blocks: scale from the block's largest magnitude, then codes.
template <typename PutCode>
void encode_blocks(const float* x, size_t n, float levels, uint8_t* scales, PutCode put) {
  for (size_t b = 0; b < n / kKvQuantBlock; ++b) {
    const float* xb = x + b * kKvQuantBlock;
    float amax = 0.0f;
    for (size_t i = 0; i < kKvQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const uint16_t s16 = kv_block_scale(amax, levels);
    std::memcpy(scales + 2 * b, &s16, 2);
    const float scale = kv_decode_f16(s16);
    for (size_t i = 0; i < kKvQuantBlock; ++i) {
      put(b * kKvQuantBlock + i, kv_block_code(xb[i], scale, static_cast<int>(levels)));
    }
  }
}

// q4r's blocks: the scale from the block's value of largest magnitude (the first on ties), then
// 4-bit codes, value 2i in the low nibble of byte i.
void encode_q4_blocks(const float* x, size_t n, uint8_t* dst) {
  for (size_t b = 0; b < n / kKvQuantBlock; ++b) {
    const float* xb = x + b * kKvQuantBlock;
    float m = 0.0f;
    for (size_t i = 0; i < kKvQuantBlock; ++i) {
      if (std::fabs(xb[i]) > std::fabs(m)) m = xb[i];
    }
    const uint16_t s16 = kv_encode_f16(m / -8.0f);
    std::memcpy(dst + n / 2 + 2 * b, &s16, 2);
    const float scale = kv_decode_f16(s16);
    for (size_t i = 0; i < kKvQuantBlock; ++i) {
      const size_t c = b * kKvQuantBlock + i;
      dst[c / 2] |= static_cast<uint8_t>((kv_q4_code(xb[i], scale) + 8) << (4 * (c % 2)));
    }
  }
}

template <KvType T>
void decode_range(const uint8_t* row, size_t n, size_t first, size_t count, float* out) {
  const size_t data = kv_data_bytes(T, n);
  for (size_t i = 0; i < count; ++i) out[i] = kv_load<T>(row, data, first + i);
}

}  // namespace

void kv_encode_row(KvType t, const float* x, size_t n, uint8_t* dst) {
  switch (t) {
    case KvType::kF32:
      std::memcpy(dst, x, 4 * n);
      return;
    case KvType::kBf16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = kv_encode_bf16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvType::kF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = kv_encode_f16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvType::kFp8:
      for (size_t i = 0; i < n; ++i) dst[i] = kv_encode_fp8(x[i]);
      return;
    case KvType::kQ8_0:
      encode_blocks(x, n, 127.0f, dst + n,
                    [&](size_t i, int q) { dst[i] = static_cast<uint8_t>(static_cast<int8_t>(q)); });
      return;
    case KvType::kQ4r:
      std::memset(dst, 0, n / 2);
      encode_q4_blocks(x, n, dst);
      return;
  }
}

void kv_decode_range(KvType t, const uint8_t* row, size_t n, size_t first, size_t count, float* out) {
  switch (t) {
    case KvType::kF32:
      std::memcpy(out, row + 4 * first, 4 * count);
      return;
    case KvType::kBf16:
      decode_range<KvType::kBf16>(row, n, first, count, out);
      return;
    case KvType::kF16:
      decode_range<KvType::kF16>(row, n, first, count, out);
      return;
    case KvType::kFp8:
      decode_range<KvType::kFp8>(row, n, first, count, out);
      return;
    case KvType::kQ8_0:
      decode_range<KvType::kQ8_0>(row, n, first, count, out);
      return;
    case KvType::kQ4r:
      decode_range<KvType::kQ4r>(row, n, first, count, out);
      return;
  }
}

void kv_write_rows(KvType t, const float* src, size_t src_stride, const uint32_t* rows, size_t n_rows, size_t n,
                   void* pool) {
  const size_t row_bytes = kv_row_bytes(t, n);
  for (size_t i = 0; i < n_rows; ++i) {
    kv_encode_row(t, src + i * src_stride, n, static_cast<uint8_t*>(pool) + size_t{rows[i]} * row_bytes);
  }
}

void hadamard_heads(float* x, size_t n_rows, size_t row_stride, size_t n_heads, size_t head_stride, size_t head_dim) {
  const float inv = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (size_t r = 0; r < n_rows; ++r) {
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = x + r * row_stride + h * head_stride;
      for (size_t len = 1; len < head_dim; len *= 2) {
        for (size_t i = 0; i < head_dim; ++i) {
          if ((i & len) != 0) continue;
          const float a = v[i], b = v[i + len];
          v[i] = a + b;
          v[i + len] = a - b;
        }
      }
      for (size_t i = 0; i < head_dim; ++i) v[i] *= inv;
    }
  }
}

}  // namespace ds::cpu
