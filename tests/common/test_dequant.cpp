// Dequantization with exact small-integer inputs: the expected values are exact, so the
// comparison is bit-exact (no tolerance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/ggml_types.h"
#include "common/gguf_writer.h"

namespace ds {
namespace {

void put_f16(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

TEST(Dequant, F16AndBF16RoundTripExactValues) {
  const float vals[] = {0.0f,         -0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f /* min normal */,
                        5.9604645e-8f /* min subnormal */};
  for (float v : vals) EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(v)), v) << v;
  EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(3.0f)), 3.0f);
  EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(-1.0f / 128.0f)), -1.0f / 128.0f);
  uint16_t raw[3] = {fp32_to_fp16(1.5f), fp32_to_fp16(-4.0f), fp32_to_fp16(0.25f)};
  float out[3];
  dequantize_row(GgmlType::F16, raw, out, 3);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -4.0f);
  EXPECT_EQ(out[2], 0.25f);
  uint16_t rawb[2] = {fp32_to_bf16(7.0f), fp32_to_bf16(-0.5f)};
  dequantize_row(GgmlType::BF16, rawb, out, 2);
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(out[1], -0.5f);
}

TEST(Dequant, Q8_0ExactIntegers) {
  BlockQ8_0 blk[2];
  blk[0].d = fp32_to_fp16(0.5f);
  blk[1].d = fp32_to_fp16(-2.0f);
  for (int i = 0; i < 32; ++i) {
    blk[0].qs[i] = static_cast<int8_t>(i - 16);
    blk[1].qs[i] = static_cast<int8_t>(127 - 8 * i);
  }
  float out[64];
  dequantize_row(GgmlType::Q8_0, blk, out, 64);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(out[i], 0.5f * (i - 16));
    EXPECT_EQ(out[32 + i], -2.0f * (127 - 8 * i));
  }
}

TEST(Dequant, Q8_0QuantizeRoundTripsRepresentableValues) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = 0.25f * (i - 20);  // max |x| = 5 -> d = 5/127
  std::vector<uint8_t> q = quantize_q8_0(x, 32);
  float y[32];
  dequantize_row(GgmlType::Q8_0, q.data(), y, 32);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(y[i], x[i], 5.0f / 127.0f / 2.0f + 1e-6f);
}

TEST(Dequant, Q4_KExactIntegers) {
  uint8_t blk[144] = {};
  put_f16(blk, 1.0f);      // d
  put_f16(blk + 2, 0.5f);  // dmin
  uint8_t* scales = blk + 4;
  // sub-blocks 0..3: sc = j+1, m = j ; sub-blocks 4..7: sc = 16+j (needs the high bits), m = 2j
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(j + 1);
    scales[j + 4] = static_cast<uint8_t>(j);
  }
  for (int j = 4; j < 8; ++j) {
    const int sc = 16 + j, m = 2 * j;
    scales[j + 4] = static_cast<uint8_t>((sc & 15) | ((m & 15) << 4));
    scales[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
    scales[j] |= static_cast<uint8_t>((m >> 4) << 6);
  }
  uint8_t* qs = blk + 16;
  for (int i = 0; i < 128; ++i) qs[i] = static_cast<uint8_t>((i % 16) | (((i + 3) % 16) << 4));
  float out[256];
  dequantize_row(GgmlType::Q4_K, blk, out, 256);
  auto sc_of = [](int j) { return j < 4 ? j + 1 : 16 + j; };
  auto m_of = [](int j) { return j < 4 ? j : 2 * j; };
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      const int b = qs[32 * g + l];
      EXPECT_EQ(out[64 * g + l], 1.0f * sc_of(2 * g) * (b & 15) - 0.5f * m_of(2 * g)) << g << " " << l;
      EXPECT_EQ(out[64 * g + 32 + l], 1.0f * sc_of(2 * g + 1) * (b >> 4) - 0.5f * m_of(2 * g + 1)) << g << " " << l;
    }
  }
}

TEST(Dequant, Q6_KExactIntegers) {
  uint8_t blk[210] = {};
  uint8_t* ql = blk;
  uint8_t* qh = blk + 128;
  int8_t* sc = reinterpret_cast<int8_t*>(blk + 192);
  put_f16(blk + 208, 0.25f);
  for (int i = 0; i < 16; ++i) sc[i] = static_cast<int8_t>(i - 8);
  for (int i = 0; i < 128; ++i) ql[i] = static_cast<uint8_t>(i * 7);
  for (int i = 0; i < 64; ++i) qh[i] = static_cast<uint8_t>(i * 13);
  float out[256];
  dequantize_row(GgmlType::Q6_K, blk, out, 256);
  // Independent evaluation: element e -> (half n, quarter q, lane l).
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const uint8_t lo_byte = ql[64 * n + l + (quarter & 1) * 32];
    const int lo = quarter < 2 ? (lo_byte & 15) : (lo_byte >> 4);
    const int hi = (qh[32 * n + l] >> (2 * quarter)) & 3;
    const int scale = sc[8 * n + l / 16 + 2 * quarter];
    EXPECT_EQ(out[e], 0.25f * scale * ((lo | (hi << 4)) - 32)) << e;
  }
}

TEST(Dequant, RowBytesAndUnknownTypes) {
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0, 64), 68u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_K, 512), 288u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 256), 210u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::BF16, 3), 6u);
  EXPECT_ANY_THROW(ggml_row_bytes(GgmlType::Q8_0, 33));
  float out[32];
  uint8_t junk[64] = {};
  EXPECT_ANY_THROW(dequantize_row(GgmlType::Q4_0, junk, out, 32));
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {
TEST(Dequant, Fp16RoundingMatchesNearestEven) {
  // 1 + 2^-11 is exactly halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(1.0f + 1.0f / 2048)), 1.0f);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(70000.0f)), INFINITY);
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(65519.0f)), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(3.0f * 5.9604645e-8f)), 3.0f * 5.9604645e-8f);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(NAN))));
}
}  // namespace
}  // namespace ds
