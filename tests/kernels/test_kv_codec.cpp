// The KV cache's codecs (common/kv_format.h, kernels/cpu/kv_codec.h): each scalar encoder against
// an independent rounding (the compiler's _Float16, a nearest search over all 256 e4m3 codes),
// each type's round trip within its stated bound, the rotation an involution that keeps dot
// products, and attention over an encoded pool equal, bit for bit, to attention over the decoded
// values in an f32 pool (the read decodes, it never approximates further).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_codec.h"
#include "tests/kernels/kernel_test_util.h"

namespace ds::cpu {
namespace {

using test::Rng;

constexpr KvType kTypes[] = {KvType::kF32, KvType::kBf16, KvType::kF16, KvType::kQ8_0, KvType::kFp8, KvType::kQ4r};

std::vector<float> probe_values(Rng& rng) {
  std::vector<float> v = {0.0f,  -0.0f,  1.0f,   -1.0f,     0.5f,         65504.0f,      65519.0f, 1e-8f, 6.1e-5f,
                          3e-5f, 448.0f, 464.0f, 0.015625f, 0.001953125f, 0.0029296875f, 1e30f,    -1e30f};
  for (int i = 0; i < 20000; ++i) {
    const float m = rng.uniform(-1.0f, 1.0f);
    v.push_back(std::ldexp(m, rng.integer(-30, 20)));
  }
  return v;
}

TEST(KvCodec, F16EqualsTheCompilersRoundingInRange) {
  Rng rng(1);
  for (const float x : probe_values(rng)) {
    if (std::fabs(x) >= 65520.0f) {
      EXPECT_EQ(kv_decode_f16(kv_encode_f16(x)), std::copysign(65504.0f, x)) << x;  // saturates
      continue;
    }
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(kv_encode_f16(x), want) << x;
    ASSERT_EQ(kv_decode_f16(want), static_cast<float>(h)) << x;
  }
}

TEST(KvCodec, Fp8IsTheNearestCodeTiesToEven) {
  Rng rng(2);
  std::vector<float> table;
  for (int c = 0; c < 128; ++c) table.push_back(kv_decode_fp8(static_cast<uint8_t>(c)));  // c = 127: NaN
  for (const float x : probe_values(rng)) {
    const float a = std::fmin(std::fabs(x), 448.0f);
    int best = 0;
    for (int c = 1; c < 127; ++c) {
      const float dc = std::fabs(table[c] - a), db = std::fabs(table[best] - a);
      if (dc < db || (dc == db && c % 2 == 0)) best = c;
    }
    const uint8_t got = kv_encode_fp8(x);
    ASSERT_EQ(got & 0x7f, best) << x;
    if (a != 0.0f) {
      ASSERT_EQ(got >> 7, std::signbit(x) ? 1 : 0) << x;
    }
  }
}

TEST(KvCodec, Bf16RoundsToNearestEven) {
  EXPECT_EQ(kv_encode_bf16(1.0f), 0x3f80);
  EXPECT_EQ(kv_encode_bf16(kv_bits_f32(0x3f808000u)), 0x3f80);  // tie, even below
  EXPECT_EQ(kv_encode_bf16(kv_bits_f32(0x3f818000u)), 0x3f82);  // tie, even above
  EXPECT_EQ(kv_encode_bf16(kv_bits_f32(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(kv_decode_bf16(kv_encode_bf16(NAN))));
}

// The bound of one value's round trip, for values of a 32-block whose largest magnitude is amax.
double bound(KvType t, float x, float amax) {
  switch (t) {
    case KvType::kF32:
      return 0;
    case KvType::kBf16:
      return std::fabs(x) * std::ldexp(1.0, -8);
    case KvType::kF16:
      return std::fabs(x) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
    case KvType::kFp8:
      return std::fabs(x) * std::ldexp(1.0, -4) + std::ldexp(1.0, -10);
    // half a step, plus the f16 scale's rounding carried over the block (<= 127 steps)
    case KvType::kQ8_0:
      return amax / 127 * (0.5 + 127 * std::ldexp(1.0, -11)) + 1e-12;
    // half a step of amax / 8; a value of the other sign at the block's magnitude clamps to 7
    // steps: one whole step off (plus the scale's rounding)
    case KvType::kQ4r:
      return amax / 8 * (1 + 8 * std::ldexp(1.0, -11)) + 1e-12;
  }
  return 0;
}

TEST(KvCodec, RoundTripWithinEachTypesBound) {
  Rng rng(3);
  const size_t n = 256;
  for (const KvType t : kTypes) {
    for (const float range : {1e-3f, 1.0f, 30.0f}) {
      std::vector<float> x = rng.vec(n, -range, range);
      x[5] = 0.0f;
      std::vector<uint8_t> row(kv_row_bytes(t, n));
      kv_encode_row(t, x.data(), n, row.data());
      std::vector<float> y(n);
      kv_decode_range(t, row.data(), n, 0, n, y.data());
      for (size_t i = 0; i < n; ++i) {
        float amax = 0;
        for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        ASSERT_LE(std::fabs(y[i] - x[i]), bound(t, x[i], amax)) << kv_type_name(t) << " i=" << i << " x=" << x[i];
      }
      float part[7];
      kv_decode_range(t, row.data(), n, 100, 7, part);  // a range decodes as the whole row does
      for (size_t i = 0; i < 7; ++i) ASSERT_EQ(part[i], y[100 + i]);
    }
  }
}

TEST(KvCodec, RowBytesAndProblems) {
  EXPECT_EQ(kv_row_bytes(KvType::kF32, 1024), 4096u);
  EXPECT_EQ(kv_row_bytes(KvType::kBf16, 1024), 2048u);
  EXPECT_EQ(kv_row_bytes(KvType::kQ8_0, 1024), 1024u + 64u);  // 8.5 bits a value, llama.cpp's q8_0
  EXPECT_EQ(kv_row_bytes(KvType::kQ4r, 1024), 512u + 64u);    // 4.5 bits
  EXPECT_EQ(kv_row_bytes(KvType::kFp8, 1024), 1024u);
  EXPECT_EQ(kv_type_problem(KvType::kQ8_0, 256, 1024), nullptr);
  EXPECT_NE(kv_type_problem(KvType::kQ8_0, 48, 96), nullptr);   // not whole blocks
  EXPECT_NE(kv_type_problem(KvType::kQ4r, 96, 192), nullptr);   // not a power of two
  EXPECT_NE(kv_type_problem(KvType::kBf16, 1, 1), nullptr);     // a 2-byte row
  EXPECT_EQ(kv_type_problem(KvType::kQ8_0, 64, 128), nullptr);  // 136-byte rows (the tiny model's)
  for (const KvType t : kTypes) EXPECT_EQ(parse_kv_type(kv_type_name(t)), t);
  EXPECT_FALSE(parse_kv_type("q4_0").has_value());
}

TEST(KvCodec, WriteRowsPlacesEncodedRowsAndLeavesOthers) {
  Rng rng(4);
  const size_t n = 64, pool_rows = 9;
  for (const KvType t : kTypes) {
    const size_t rb = kv_row_bytes(t, n);
    std::vector<uint8_t> pool(pool_rows * rb, 0xAB);
    const std::vector<float> src = rng.vec(3 * n, -2, 2);
    const uint32_t rows[] = {7, 2, 4};
    kv_write_rows(t, src.data(), n, rows, 3, n, pool.data());
    for (size_t r = 0; r < pool_rows; ++r) {
      std::vector<uint8_t> want(rb, 0xAB);
      for (size_t i = 0; i < 3; ++i) {
        if (rows[i] == r) kv_encode_row(t, src.data() + i * n, n, want.data());
      }
      ASSERT_EQ(std::memcmp(pool.data() + r * rb, want.data(), rb), 0) << kv_type_name(t) << " row " << r;
    }
  }
}

TEST(KvCodec, HadamardIsAnInvolutionKeepingDots) {
  Rng rng(5);
  for (const size_t d : {32, 64, 128, 256}) {
    const std::vector<float> a = rng.vec(2 * d, -2, 2), b = rng.vec(2 * d, -2, 2);
    std::vector<float> ra = a, rb = b;
    hadamard_heads(ra.data(), 1, 2 * d, 2, d, d);
    hadamard_heads(rb.data(), 1, 2 * d, 2, d, d);
    double dot = 0, rdot = 0;
    for (size_t i = 0; i < d; ++i) dot += double(a[i]) * b[i], rdot += double(ra[i]) * rb[i];
    EXPECT_NEAR(rdot, dot, 1e-4 * d) << d;
    std::vector<float> back = ra;
    hadamard_heads(back.data(), 1, 2 * d, 2, d, d);
    for (size_t i = 0; i < 2 * d; ++i) ASSERT_NEAR(back[i], a[i], 1e-5) << d << " " << i;
    std::vector<float> e0(d, 0.0f);
    e0[0] = 1.0f;
    hadamard_heads(e0.data(), 1, d, 1, d, d);
    for (const float x : e0) ASSERT_FLOAT_EQ(x, 1.0f / std::sqrt(float(d)));
  }
}

// Attention reads decoded values exactly: the result over an encoded pool equals, bit for bit,
// the result over an f32 pool holding those decoded values.
TEST(KvCodec, AttentionOverEncodedPoolEqualsDecodedF32Pool) {
  Rng rng(6);
  const size_t H = 4, Hkv = 2, d = 64, row = Hkv * d, bs = 16, kv_len = 45, n_q = 3, pool_rows = 4 * bs;
  const std::vector<int32_t> table = {2, 0, 3};
  const std::vector<float> k = rng.vec(pool_rows * row, -2, 2), v = rng.vec(pool_rows * row, -2, 2);
  const std::vector<float> q = rng.vec(n_q * H * d, -2, 2);
  std::vector<uint32_t> rows(pool_rows);
  std::iota(rows.begin(), rows.end(), 0u);
  const AttentionShape s{n_q, kv_len, H, Hkv, d, H * d, d, row, H * d};
  for (const KvType t : kTypes) {
    std::vector<uint8_t> kp(pool_rows * kv_row_bytes(t, row)), vp(kp.size());
    kv_write_rows(t, k.data(), row, rows.data(), pool_rows, row, kp.data());
    kv_write_rows(t, v.data(), row, rows.data(), pool_rows, row, vp.data());
    std::vector<float> kd(k.size()), vd(v.size());
    for (size_t r = 0; r < pool_rows; ++r) {
      kv_decode_range(t, kp.data() + r * kv_row_bytes(t, row), row, 0, row, kd.data() + r * row);
      kv_decode_range(t, vp.data() + r * kv_row_bytes(t, row), row, 0, row, vd.data() + r * row);
    }
    std::vector<float> got(n_q * H * d), want(got.size());
    attention_causal(s, q.data(), KvPages{kp.data(), vp.data(), table.data(), bs, t, t}, 0.125f, got.data(), nullptr);
    attention_causal(s, q.data(), KvPages{kd.data(), vd.data(), table.data(), bs}, 0.125f, want.data(), nullptr);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << kv_type_name(t);
  }
}

}  // namespace
}  // namespace ds::cpu
