// CUDA Gated DeltaNet (decode and prefill forms) and causal GQA attention against kernels/cpu.
//
// GDN tolerance: the GPU runs the exact recurrence in f32 with the CPU's operation order (up to
// FMA contraction and expf ulps); errors stay at a few ulp per token and do not grow because the
// keys are unit vectors and beta < 1 (the update is a contraction). We allow 2e-5 relative to the
// largest output / state value over up to 200 tokens.
// Attention tolerance: online softmax (running max) vs the CPU's two-pass softmax and a different
// summation order of q.k and p.v: a few ulp of the largest value; we allow 1e-5 relative. Both
// read the same paged cache (shuffled block table).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gdn.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/gdn.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

constexpr double kGdnTol = 2e-5;
constexpr double kAttentionTol = 1e-5;

// ---- GDN -------------------------------------------------------------------------------------------

struct GdnCase {
  size_t n_tokens, nk, nv, dk, dv;
  bool prefill;
};

// Inputs shaped like the model's: q, k, v inside one conv row of stride C (+ padding), q/k
// L2-normalized, g <= 0, beta in (0, 1).
struct GdnInputs {
  GdnShape s;
  std::vector<float> conv, g, beta, state;
  GdnInputs(const GdnCase& c, Rng& rng) {
    const size_t C = 2 * c.nk * c.dk + c.nv * c.dv + 3;
    s = GdnShape{c.n_tokens, c.nk, c.nv, c.dk, c.dv, C, C};
    conv = rng.vec(c.n_tokens * C);
    for (size_t t = 0; t < c.n_tokens; ++t) {
      for (size_t h = 0; h < 2 * c.nk; ++h) normalize(&conv[t * C + h * c.dk], c.dk);
    }
    g = rng.vec(c.n_tokens * c.nv, -2.0f, -0.01f);
    beta = rng.vec(c.n_tokens * c.nv, 0.05f, 0.95f);
    state = rng.vec(c.nv * c.dk * c.dv, -0.5f, 0.5f);
  }
  static void normalize(float* x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] / std::sqrt(s + 1e-6));
  }
  size_t k_off() const { return s.n_k_heads * s.dk; }
  size_t v_off() const { return 2 * s.n_k_heads * s.dk; }
};

class CudaGdn : public ::testing::TestWithParam<GdnCase> {};

// Two calls in a row so the second starts from the state the first left on the device.
TEST_P(CudaGdn, OutputAndStateMatchCpuRecurrence) {
  DS_REQUIRE_GPU();
  const GdnCase c = GetParam();
  Rng rng(20 + c.n_tokens);
  GdnInputs in(c, rng);
  std::vector<float> state = in.state;
  DeviceArray<float> dstate(state);
  for (int call = 0; call < 2; ++call) {
    if (call == 1) in = GdnInputs(c, rng);  // fresh inputs; states carry over
    const size_t out_n = c.n_tokens * c.nv * c.dv;
    std::vector<float> want(out_n);
    const float* q = in.conv.data();
    cpu::gdn_recurrent(in.s, q, q + in.k_off(), q + in.v_off(), in.g.data(), in.beta.data(), state.data(), want.data(),
                       nullptr);
    DeviceArray<float> dconv(in.conv), dg(in.g), db(in.beta), dout(out_n);
    const float* dq = dconv.get();
    const auto launch = c.prefill ? gdn_prefill : gdn_recurrent;
    DS_CUDA_CHECK(
        launch(in.s, dq, dq + in.k_off(), dq + in.v_off(), dg.get(), db.get(), dstate.get(), dout.get(), nullptr));
    EXPECT_LE(rel_error(dout.download(), want), kGdnTol) << "call " << call;
    EXPECT_LE(rel_error(dstate.download(), state), kGdnTol) << "call " << call;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGdn,
                         ::testing::Values(GdnCase{1, 2, 4, 32, 32, false}, GdnCase{1, 16, 32, 128, 128, false},
                                           GdnCase{7, 2, 4, 32, 32, false}, GdnCase{2, 2, 4, 32, 32, true},
                                           GdnCase{67, 2, 6, 24, 40, true}, GdnCase{200, 4, 8, 128, 128, true},
                                           GdnCase{33, 3, 3, 17, 70, true}));

// The CPU backend uses the chunked form for prefill; the GPU's exact recurrence must agree with it
// too (the chunked form differs from the recurrence by float rounding only).
TEST(CudaGdn, PrefillMatchesCpuChunked) {
  DS_REQUIRE_GPU();
  const GdnCase c{150, 2, 4, 64, 64, true};
  Rng rng(30);
  GdnInputs in(c, rng);
  std::vector<float> state = in.state, want(c.n_tokens * c.nv * c.dv);
  const float* q = in.conv.data();
  cpu::gdn_chunked(in.s, q, q + in.k_off(), q + in.v_off(), in.g.data(), in.beta.data(), state.data(), want.data(), 64,
                   nullptr);
  DeviceArray<float> dconv(in.conv), dg(in.g), db(in.beta), dstate(in.state), dout(want.size());
  const float* dq = dconv.get();
  DS_CUDA_CHECK(
      gdn_prefill(in.s, dq, dq + in.k_off(), dq + in.v_off(), dg.get(), db.get(), dstate.get(), dout.get(), nullptr));
  EXPECT_LE(rel_error(dout.download(), want), 1e-4);  // chunked vs sequential rounding
  EXPECT_LE(rel_error(dstate.download(), state), 1e-4);
}

// ---- attention ---------------------------------------------------------------------------------------

struct AttnCase {
  size_t n_q, kv_len, H, Hkv, d;
};

class CudaAttention : public ::testing::TestWithParam<AttnCase> {};

// A paged cache as the model lays it out: the sequence's rows in shuffled pool blocks (block
// size 16), with the blocks it does not own filled with other values.
struct PagedKv {
  std::vector<int32_t> table;
  std::vector<float> k_pool, v_pool;
  PagedKv(const std::vector<float>& k, const std::vector<float>& v, size_t kv_len, size_t row, size_t block_size,
          Rng& rng) {
    const size_t n_blocks = (kv_len + block_size - 1) / block_size, pool_blocks = 2 * n_blocks + 1;
    std::vector<int32_t> ids(pool_blocks);
    for (size_t i = 0; i < pool_blocks; ++i) ids[i] = static_cast<int32_t>(i);
    for (size_t i = pool_blocks - 1; i > 0; --i) {
      std::swap(ids[i], ids[static_cast<size_t>(rng.integer(0, static_cast<int>(i)))]);
    }
    table.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n_blocks));
    k_pool = rng.vec(pool_blocks * block_size * row, -3, 3);
    v_pool = rng.vec(k_pool.size(), -3, 3);
    for (size_t tau = 0; tau < kv_len; ++tau) {
      const size_t at = cpu::kv_row_offset(table.data(), block_size, row, tau);
      for (size_t i = 0; i < row; ++i) {
        k_pool[at + i] = k[tau * row + i];
        v_pool[at + i] = v[tau * row + i];
      }
    }
  }
};

// Layout of the model: q rows [H][query | gate] (stride 2d per head), cache rows Hkv*d in
// shuffled pool blocks; CPU and GPU read the same pages.
TEST_P(CudaAttention, MatchesCpu) {
  DS_REQUIRE_GPU();
  const AttnCase c = GetParam();
  Rng rng(40 + c.kv_len);
  const size_t row = c.Hkv * c.d, block_size = 16;
  const AttentionShape s{c.n_q, c.kv_len, c.H, c.Hkv, c.d, 2 * c.H * c.d, 2 * c.d, row, c.H * c.d};
  const std::vector<float> q = rng.vec(c.n_q * 2 * c.H * c.d, -2, 2);
  const std::vector<float> k = rng.vec(c.kv_len * row, -2, 2), v = rng.vec(c.kv_len * row);
  const PagedKv paged(k, v, c.kv_len, row, block_size, rng);
  std::vector<float> want(c.n_q * c.H * c.d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const cpu::KvPages host_kv{paged.k_pool.data(), paged.v_pool.data(), paged.table.data(), block_size};
  cpu::attention_causal(s, q.data(), host_kv, scale, want.data(), nullptr);
  DeviceArray<float> dq(q), dk(paged.k_pool), dv(paged.v_pool), dout(want.size());
  DeviceArray<int32_t> dtable(paged.table);
  DS_CUDA_CHECK(cuda::attention_causal(s, dq.get(), KvPages{dk.get(), dv.get(), dtable.get(), block_size}, scale,
                                       dout.get(), nullptr));
  EXPECT_LE(rel_error(dout.download(), want), kAttentionTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(AttnCase{1, 1, 4, 2, 64}, AttnCase{1, 3000, 8, 2, 256},
                                           AttnCase{37, 37, 4, 2, 64}, AttnCase{5, 1000, 16, 4, 128},
                                           AttnCase{70, 100, 6, 3, 80}, AttnCase{3, 10, 2, 1, 96},
                                           AttnCase{2, 9000, 24, 4, 256},
                                           // split-K decode path (<= 8 query tokens, group <= 8): the
                                           // 9B decode shape at 16K, group 8, MTP-style verify rows,
                                           // head dims that are not multiples of 32, one key; group
                                           // 12 falls back to the one-block-per-head kernel.
                                           AttnCase{1, 16384, 16, 4, 256}, AttnCase{1, 777, 16, 2, 128},
                                           AttnCase{4, 4100, 16, 4, 256}, AttnCase{8, 300, 8, 8, 80},
                                           AttnCase{1, 1, 16, 4, 256}, AttnCase{3, 40, 6, 2, 200},
                                           AttnCase{1, 2, 12, 1, 256}));

// The cases above reach the split-K decode kernels only if the dispatch picks them: pin which
// shapes take that path (host-only, runs without a GPU too).
TEST(CudaAttentionDecode, SplitKPathTakesDecodeShapes) {
  const auto shape = [](size_t n_q, size_t H, size_t Hkv, size_t d) {
    return AttentionShape{n_q, 100, H, Hkv, d, 2 * H * d, 2 * d, Hkv * d, H * d};
  };
  EXPECT_TRUE(detail::attention_decode_applies(shape(1, 16, 4, 256)));   // 9B decode
  EXPECT_TRUE(detail::attention_decode_applies(shape(8, 16, 2, 128)));   // verify rows, group 8
  EXPECT_FALSE(detail::attention_decode_applies(shape(9, 16, 4, 256)));  // prefill chunk
  EXPECT_FALSE(detail::attention_decode_applies(shape(1, 12, 1, 256)));  // group 12
}

TEST(CudaAttentionArgs, RejectsHeadDimAboveLimitAndBadGroups) {
  float dummy[4] = {};
  const int32_t table[1] = {0};
  const KvPages kv{dummy, dummy, table, 16};
  const AttentionShape big{1, 1, 1, 1, 512, 1024, 512, 512, 512};
  EXPECT_EQ(cuda::attention_causal(big, dummy, kv, 1.0f, dummy, nullptr), cudaErrorInvalidValue);
  const AttentionShape groups{1, 1, 3, 2, 64, 384, 128, 128, 192};
  EXPECT_EQ(cuda::attention_causal(groups, dummy, kv, 1.0f, dummy, nullptr), cudaErrorInvalidValue);
  const AttentionShape ok{1, 1, 1, 1, 4, 4, 4, 4, 4};
  EXPECT_EQ(cuda::attention_causal(ok, dummy, KvPages{dummy, dummy, table, 0}, 1.0f, dummy, nullptr),
            cudaErrorInvalidValue);  // block size 0
  EXPECT_EQ(cuda::attention_causal(ok, dummy, KvPages{dummy, dummy, nullptr, 16}, 1.0f, dummy, nullptr),
            cudaErrorInvalidValue);  // no block table
}

}  // namespace
}  // namespace ds::cuda::test
