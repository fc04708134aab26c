// Tiled (flash-style) prefill attention against kernels/cpu attention over the same paged cache:
// model shapes (head_dim 256, GQA groups of 4 and 6), query tiles that end mid-tile, prefill chunks
// that start after earlier rows (kv_len > n_q), small heads, and argument checks.
//
// Tolerance kTol = 2e-5 relative (max |got - want| / max |want|): both sides are f32 with an online
// softmax; only the summation order (tiles of 32 keys, 4-wide partial dots) and expf ulps differ,
// which moves outputs by a few ulp of their O(1) size. A wrong mask, tile edge or page lookup is O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/ggml_types.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention_prefill.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

constexpr double kTol = 2e-5;

struct Case {
  size_t n_q, kv_len, H, Hkv, d;
};

// The sequence's rows in shuffled pool blocks of 16 (other blocks hold unrelated values).
struct Paged {
  std::vector<int32_t> table;
  std::vector<float> k_pool, v_pool;
  Paged(size_t kv_len, size_t row, size_t block_size, Rng& rng) {
    const size_t n_blocks = (kv_len + block_size - 1) / block_size, pool_blocks = 2 * n_blocks + 1;
    std::vector<int32_t> ids(pool_blocks);
    for (size_t i = 0; i < pool_blocks; ++i) ids[i] = static_cast<int32_t>(i);
    for (size_t i = pool_blocks - 1; i > 0; --i) {
      std::swap(ids[i], ids[static_cast<size_t>(rng.integer(0, static_cast<int>(i)))]);
    }
    table.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n_blocks));
    k_pool = rng.vec(pool_blocks * block_size * row, -2, 2);
    v_pool = rng.vec(k_pool.size(), -1, 1);
  }
};

class CudaAttentionPrefill : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttentionPrefill, MatchesCpu) {
  DS_REQUIRE_GPU();
  const Case c = GetParam();
  Rng rng(70 + c.kv_len + c.d);
  const size_t row = c.Hkv * c.d, block_size = 16;
  // Model layout: q rows [H][query | gate] (head stride 2d), output [n_q][H][d].
  const AttentionShape s{c.n_q, c.kv_len, c.H, c.Hkv, c.d, 2 * c.H * c.d, 2 * c.d, row, c.H * c.d};
  const std::vector<float> q = rng.vec(c.n_q * 2 * c.H * c.d, -2, 2);
  const Paged paged(c.kv_len, row, block_size, rng);
  std::vector<float> want(c.n_q * c.H * c.d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  cpu::attention_causal(s, q.data(),
                        cpu::KvPages{paged.k_pool.data(), paged.v_pool.data(), paged.table.data(), block_size}, scale,
                        want.data(), nullptr);
  DeviceArray<float> dq(q), dk(paged.k_pool), dv(paged.v_pool), dout(want.size());
  DeviceArray<int32_t> dtable(paged.table);
  dout.upload(std::vector<float>(want.size(), NAN));  // every output must be written
  const KvPages kv{dk.get(), dv.get(), dtable.get(), block_size};
  ASSERT_TRUE(attention_prefill_applies(s, dq.get(), kv, dout.get()));
  DS_CUDA_CHECK(attention_prefill(s, dq.get(), kv, scale, dout.get(), nullptr));
  const std::vector<float> got = dout.download();
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LE(rel_error(got, want), kTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionPrefill,
                         ::testing::Values(Case{300, 300, 16, 4, 256},   // 9B heads, partial last tile
                                           Case{128, 1000, 16, 4, 256},  // a later chunk of a prefill
                                           Case{64, 64, 24, 4, 256},     // 27B group of 6, one tile
                                           Case{37, 37, 4, 2, 64},       // tiny fixture heads
                                           Case{19, 50, 6, 3, 80},       // head_dim not a multiple of 32
                                           Case{1, 33, 2, 1, 256}));     // one query row

// Tensor-core variant. Its reference is the CPU attention on the operands it rounds: q * scale, K
// and V rounded to bf16 (then scale 1), so what remains is the bf16 rounding of the softmax weights
// P (relative 2^-9 each, in a weighted average of V rows, |v| <= 1) and summation order:
// kTcTol = 4e-3 relative (max |got - want| / max |want|), about 2^-8. Against the unrounded inputs
// the error is larger (scores move by ~2^-8 |q||k|); the model-level bound for the bf16 prefill
// mode is in test_cuda_model_bf16.cpp.
constexpr double kTcTol = 4e-3;

float round_bf16(float x) {
  return bf16_to_fp32(fp32_to_bf16(x));
}

class CudaAttentionPrefillTc : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttentionPrefillTc, MatchesCpuOnRoundedOperands) {
  DS_REQUIRE_GPU();
  const Case c = GetParam();
  Rng rng(170 + c.kv_len + c.d);
  const size_t row = c.Hkv * c.d, block_size = 16;
  const AttentionShape s{c.n_q, c.kv_len, c.H, c.Hkv, c.d, 2 * c.H * c.d, 2 * c.d, row, c.H * c.d};
  const std::vector<float> q = rng.vec(c.n_q * 2 * c.H * c.d, -2, 2);
  Paged paged(c.kv_len, row, block_size, rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  std::vector<float> q_rounded(q.size());
  for (size_t i = 0; i < q.size(); ++i) q_rounded[i] = round_bf16(q[i] * scale);
  Paged rounded = paged;
  for (float& x : rounded.k_pool) x = round_bf16(x);
  for (float& x : rounded.v_pool) x = round_bf16(x);
  std::vector<float> want(c.n_q * c.H * c.d);
  cpu::attention_causal(s, q_rounded.data(),
                        cpu::KvPages{rounded.k_pool.data(), rounded.v_pool.data(), rounded.table.data(), block_size},
                        1.0f, want.data(), nullptr);
  DeviceArray<float> dq(q), dk(paged.k_pool), dv(paged.v_pool), dout(want.size());
  DeviceArray<int32_t> dtable(paged.table);
  dout.upload(std::vector<float>(want.size(), NAN));
  const KvPages kv{dk.get(), dv.get(), dtable.get(), block_size};
  ASSERT_TRUE(attention_prefill_tc_applies(s, dq.get(), kv, dout.get()));
  DS_CUDA_CHECK(attention_prefill_tc(s, dq.get(), kv, scale, dout.get(), nullptr));
  const std::vector<float> got = dout.download();
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  const double err = rel_error(got, want);
  EXPECT_LE(err, kTcTol);
  std::printf("[ attn tc ] n_q %zu kv %zu H %zu/%zu d %zu: rel err %.2g\n", c.n_q, c.kv_len, c.H, c.Hkv, c.d, err);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionPrefillTc,
                         ::testing::Values(Case{300, 300, 16, 4, 256},   // 9B heads, partial tiles
                                           Case{128, 1000, 16, 4, 256},  // a later prefill chunk
                                           Case{64, 64, 24, 4, 256},     // 27B group of 6
                                           Case{100, 130, 4, 2, 128},    // head_dim 128
                                           Case{37, 37, 4, 2, 64},       // the tiny fixture's heads
                                           Case{1, 33, 2, 1, 256}));     // one query row

TEST(CudaAttentionPrefill, RejectsWhatItCannotTake) {
  DS_REQUIRE_GPU();
  DeviceArray<float> buf(1 << 16);
  DeviceArray<int32_t> table(std::vector<int32_t>{0, 1, 2, 3});
  float* p = buf.get();
  const KvPages kv{p, p, table.get(), 16};
  const AttentionShape ok{16, 16, 4, 2, 64, 512, 128, 128, 256};
  EXPECT_TRUE(attention_prefill_applies(ok, p, kv, p));
  AttentionShape odd_dim = ok;
  odd_dim.head_dim = 66;
  EXPECT_FALSE(attention_prefill_applies(odd_dim, p, kv, p));
  AttentionShape big_dim = ok;
  big_dim.head_dim = 512;
  EXPECT_EQ(attention_prefill(big_dim, p, kv, 1.0f, p, nullptr), cudaErrorInvalidValue);
  EXPECT_FALSE(attention_prefill_applies(ok, p, KvPages{p + 1, p, table.get(), 16}, p));  // unaligned pool
  EXPECT_EQ(attention_prefill(ok, p, KvPages{p, p, nullptr, 16}, 1.0f, p, nullptr), cudaErrorInvalidValue);
  AttentionShape groups = ok;
  groups.n_kv_heads = 3;
  EXPECT_EQ(attention_prefill(groups, p, kv, 1.0f, p, nullptr), cudaErrorInvalidValue);
  const AttentionShape d80{16, 16, 4, 2, 80, 640, 160, 160, 320};  // kv rows hold 2 heads of 80
  EXPECT_TRUE(attention_prefill_applies(d80, p, kv, p));
  EXPECT_FALSE(attention_prefill_tc_applies(d80, p, kv, p));  // tensor-core tiles: 64, 128, 256
  EXPECT_EQ(attention_prefill_tc(d80, p, kv, 1.0f, p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace ds::cuda::test
