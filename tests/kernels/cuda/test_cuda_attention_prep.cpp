// attention_prep (kernels/cuda/attention_prep.h): an attention layer's q/k head RMSNorm + rope and
// K/V cache write in one launch must equal, bit for bit, the six CUDA launches it replaces
// (rms_norm q, rms_norm k, rope_neox q, rope_neox k, scatter_rows k, scatter_rows v): the same
// device functions (norm_rope.cuh) run on the same values. Against the CPU reference ops the
// tolerance is rel 2e-6 of the largest output (max |got - want| / max |want|): the norm differs in
// summation order (CPU double, GPU f32 lane trees: a few ulp, as test_cuda_rowwise.cpp's rms_norm
// bound), and cos/sin of the same f32 angle differ by <= 2 ulp between libm and CUDA (rope's 1e-6
// absolute bound on unit inputs in test_cuda_rowwise.cpp; normed heads are O(1) to O(sqrt(d))).
// The value rows are a copy: bit-exact. Also through CudaBackend (one packed upload of the host
// positions and pool rows, and the fallback with the fused ops off), and the rejected arguments.
// Skips without a GPU (the argument checks run anyway).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention_prep.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "worker/cuda_backend.h"

namespace ds::cuda::test {
namespace {

constexpr float kEps = 1e-6f;
constexpr float kTheta = 1e7f;
constexpr float kSentinel = -7777.0f;
constexpr double kCpuTol = 2e-6;

struct PrepCase {
  size_t tokens, heads, kv_heads, head_dim, n_rot;
  std::array<int32_t, 4> sections;
  int32_t first_pos;
};

// Host inputs of one step: q heads [query | gate], contiguous k / v rows, pools with spare rows
// (sentinels) and the step's rows scattered out of order over them.
struct HostStep {
  PrepCase c;
  std::vector<float> qg, k, v, q_norm, k_norm, pool;
  std::vector<int32_t> positions;  // [3][tokens]; the three streams differ (M-RoPE selection matters)
  std::vector<uint32_t> rows;
  size_t pool_rows;

  explicit HostStep(const PrepCase& pc) : c(pc), pool_rows(3 * pc.tokens + 2) {
    Rng rng(900 + c.tokens * 7 + c.head_dim + c.heads);
    qg = rng.vec(c.tokens * c.heads * 2 * c.head_dim, -2, 2);
    k = rng.vec(c.tokens * row(), -2, 2);
    v = rng.vec(c.tokens * row(), -2, 2);
    q_norm = rng.vec(c.head_dim, 0.5f, 1.5f);
    k_norm = rng.vec(c.head_dim, 0.5f, 1.5f);
    pool.assign(pool_rows * row(), kSentinel);
    for (size_t s = 0; s < 3; ++s) {
      for (size_t t = 0; t < c.tokens; ++t) positions.push_back(c.first_pos + static_cast<int32_t>(t + 3 * s));
    }
    for (size_t t = 0; t < c.tokens; ++t) rows.push_back(static_cast<uint32_t>(pool_rows - 1 - 3 * t));  // gaps
  }
  size_t row() const { return c.kv_heads * c.head_dim; }
};

// The step's arrays on the device (pools start as the host pools).
struct DeviceStep {
  DeviceArray<float> qg, k, v, q_norm, k_norm, k_pool, v_pool;
  DeviceArray<int32_t> positions;
  DeviceArray<uint32_t> rows;
  explicit DeviceStep(const HostStep& h)
      : qg(h.qg),
        k(h.k),
        v(h.v),
        q_norm(h.q_norm),
        k_norm(h.k_norm),
        k_pool(h.pool),
        v_pool(h.pool),
        positions(h.positions),
        rows(h.rows) {}
  cpu::AttentionPrep prep(const HostStep& h, const int32_t* pos, const uint32_t* kv_rows) {
    cpu::AttentionPrep p;
    p.n_tokens = h.c.tokens;
    p.n_heads = h.c.heads;
    p.n_kv_heads = h.c.kv_heads;
    p.head_dim = h.c.head_dim;
    p.qg = qg.get();
    p.q_head_stride = 2 * h.c.head_dim;
    p.k = k.get();
    p.v = v.get();
    p.q_norm = q_norm.get();
    p.k_norm = k_norm.get();
    p.eps = kEps;
    p.n_rot = h.c.n_rot;
    p.positions = pos;
    p.sections = h.c.sections;
    p.theta = kTheta;
    p.kv_rows = kv_rows;
    p.k_pool = k_pool.get();
    p.v_pool = v_pool.get();
    return p;
  }
  cpu::AttentionPrep device_prep(const HostStep& h) { return prep(h, positions.get(), rows.get()); }
};

// The six separate CUDA launches of the layer before the fusion.
void run_separate(const HostStep& h, DeviceStep& s) {
  const PrepCase& c = h.c;
  const size_t d = c.head_dim, qs = 2 * d, row = h.row();
  DS_CUDA_CHECK(rms_norm(s.qg.get(), qs, s.q_norm.get(), kEps, c.tokens * c.heads, d, s.qg.get(), qs, nullptr));
  DS_CUDA_CHECK(rms_norm(s.k.get(), d, s.k_norm.get(), kEps, c.tokens * c.kv_heads, d, s.k.get(), d, nullptr));
  DS_CUDA_CHECK(rope_neox(s.qg.get(), c.tokens, c.heads * qs, c.heads, qs, d, c.n_rot, s.positions.get(), c.sections,
                          kTheta, nullptr));
  DS_CUDA_CHECK(
      rope_neox(s.k.get(), c.tokens, row, c.kv_heads, d, d, c.n_rot, s.positions.get(), c.sections, kTheta, nullptr));
  DS_CUDA_CHECK(scatter_rows(s.k.get(), s.rows.get(), c.tokens, row, s.k_pool.get(), nullptr));
  DS_CUDA_CHECK(scatter_rows(s.v.get(), s.rows.get(), c.tokens, row, s.v_pool.get(), nullptr));
}

// The CPU reference ops on the host copy (the Backend default's composition).
void run_cpu(HostStep& h, std::vector<float>* k_pool, std::vector<float>* v_pool) {
  const PrepCase& c = h.c;
  const size_t d = c.head_dim, qs = 2 * d, row = h.row();
  cpu::rms_norm(h.qg.data(), qs, h.q_norm.data(), kEps, c.tokens * c.heads, d, h.qg.data(), qs);
  cpu::rms_norm(h.k.data(), d, h.k_norm.data(), kEps, c.tokens * c.kv_heads, d, h.k.data(), d);
  cpu::rope_neox(h.qg.data(), c.tokens, c.heads * qs, c.heads, qs, d, c.n_rot, h.positions.data(), c.sections, kTheta);
  cpu::rope_neox(h.k.data(), c.tokens, row, c.kv_heads, d, d, c.n_rot, h.positions.data(), c.sections, kTheta);
  *k_pool = h.pool;
  *v_pool = h.pool;
  for (size_t t = 0; t < c.tokens; ++t) {
    for (size_t i = 0; i < row; ++i) {
      (*k_pool)[h.rows[t] * row + i] = h.k[t * row + i];
      (*v_pool)[h.rows[t] * row + i] = h.v[t * row + i];
    }
  }
}

// Bitwise equality of every output of two device steps.
void expect_same_bits(DeviceStep& a, DeviceStep& b, const char* what) {
  EXPECT_TRUE(same_bits(a.qg.download(), b.qg.download())) << what << ": q heads";
  EXPECT_TRUE(same_bits(a.k.download(), b.k.download())) << what << ": k heads";
  EXPECT_TRUE(same_bits(a.k_pool.download(), b.k_pool.download())) << what << ": k pool";
  EXPECT_TRUE(same_bits(a.v_pool.download(), b.v_pool.download())) << what << ": v pool";
}

class CudaAttentionPrep : public ::testing::TestWithParam<PrepCase> {};

TEST_P(CudaAttentionPrep, EqualsTheSeparateLaunchesAndTheCpu) {
  DS_REQUIRE_GPU();
  HostStep h(GetParam());
  DeviceStep separate(h), fused(h);
  run_separate(h, separate);
  ASSERT_EQ(attention_prep(fused.device_prep(h), nullptr), cudaSuccess);
  expect_same_bits(fused, separate, "fused vs separate launches");

  const std::vector<float> q_in = h.qg;
  std::vector<float> want_k_pool, want_v_pool;
  run_cpu(h, &want_k_pool, &want_v_pool);
  const std::vector<float> got_q = fused.qg.download(), got_k_pool = fused.k_pool.download();
  EXPECT_LE(rel_error(got_q, h.qg), kCpuTol);
  EXPECT_LE(rel_error(fused.k.download(), h.k), kCpuTol);
  EXPECT_LE(rel_error(got_k_pool, want_k_pool), kCpuTol);
  EXPECT_EQ(fused.v_pool.download(), want_v_pool);  // a copy: exact, sentinel rows included
  const size_t d = h.c.head_dim, row = h.row();
  for (size_t r = 0; r < h.pool_rows; ++r) {  // the rows of no token keep their sentinels
    const bool used = std::find(h.rows.begin(), h.rows.end(), r) != h.rows.end();
    EXPECT_EQ(got_k_pool[r * row] == kSentinel, !used) << "pool row " << r;
  }
  for (size_t head = 0; head < h.c.tokens * h.c.heads; ++head) {  // gate halves untouched
    for (size_t i = d; i < 2 * d; ++i) ASSERT_EQ(got_q[head * 2 * d + i], q_in[head * 2 * d + i]) << head << "," << i;
  }
}

// T in {1, 3, 64} for the 9B layout (16 q / 4 kv heads of 256, rotary 64, M-RoPE sections) and the
// tiny fixture's (4 / 2 heads of 64, rotary 16); plus a rotary dim whose pairs span lanes
// (n_rot 30: pair (i, i + 15)), MHA (H == Hkv), and a 9-job token (jobs not a multiple of 4).
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionPrep,
    ::testing::Values(PrepCase{1, 16, 4, 256, 64, {11, 11, 10, 0}, 4095},
                      PrepCase{3, 16, 4, 256, 64, {11, 11, 10, 0}, 17},
                      PrepCase{64, 16, 4, 256, 64, {11, 11, 10, 0}, 200000}, PrepCase{1, 4, 2, 64, 16, {3, 3, 2, 0}, 9},
                      PrepCase{3, 4, 2, 64, 16, {3, 3, 2, 0}, 1}, PrepCase{64, 4, 2, 64, 16, {3, 3, 2, 0}, 300},
                      PrepCase{5, 6, 2, 80, 30, {2, 2, 1, 0}, 7}, PrepCase{7, 3, 3, 128, 128, {0, 0, 0, 0}, 1000},
                      PrepCase{2, 5, 2, 32, 32, {3, 3, 2, 0}, 50}));

// Through the backend: host positions and rows (one packed upload), and the same step with the
// fused ops off (the six separate ops of the Backend default): the launcher's bits both ways. The
// upload is skipped when it repeats the previous one (the next attention layer of a step), so a
// second layer, then a step with other positions, then one with other pool rows must each see
// their own arrays.
TEST(CudaBackendAttentionPrep, FusedAndSeparateOpsGiveTheLaunchersBits) {
  DS_REQUIRE_GPU();
  const PrepCase c{9, 16, 4, 256, 64, {11, 11, 10, 0}, 123};
  HostStep first(c), moved(c), other_rows(c);
  for (int32_t& p : moved.positions) p += 1;
  std::reverse(other_rows.rows.begin(), other_rows.rows.end());
  for (const bool fused_ops : {true, false}) {
    const std::unique_ptr<Backend> be = make_cuda_backend(0, {}, {.fused_decode_ops = fused_ops});
    for (HostStep* h : {&first, &first, &moved, &other_rows}) {
      DeviceStep got(*h), want(*h);
      be->attention_prep(got.prep(*h, h->positions.data(), h->rows.data()));
      be->synchronize();
      ASSERT_EQ(attention_prep(want.device_prep(*h), nullptr), cudaSuccess);
      expect_same_bits(got, want, fused_ops ? "backend, fused" : "backend, separate ops");
    }
  }
}

TEST(CudaBackendAttentionPrep, RefusesAnInconsistentShape) {
  DS_REQUIRE_GPU();
  HostStep h(PrepCase{2, 4, 2, 64, 16, {3, 3, 2, 0}, 0});
  DeviceStep s(h);
  const std::unique_ptr<Backend> be = make_cuda_backend(0);
  cpu::AttentionPrep p = s.prep(h, h.positions.data(), h.rows.data());
  p.n_rot = 66;  // > head_dim
  EXPECT_THROW(be->attention_prep(p), std::invalid_argument);
}

TEST(CudaAttentionPrepArgs, RefusesWhatItDoesNotTake) {  // checked before any launch: runs without a GPU
  alignas(16) static float buf[4096];
  alignas(16) static int32_t pos[64];
  alignas(16) static uint32_t rows[64];
  const auto base = [&] {
    cpu::AttentionPrep p;
    p.n_tokens = 2;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.head_dim = 64;
    p.qg = buf;
    p.q_head_stride = 128;
    p.k = buf + 1024;
    p.v = buf + 1280;
    p.q_norm = buf + 1536;
    p.k_norm = buf + 1600;
    p.eps = kEps;
    p.n_rot = 16;
    p.positions = pos;
    p.theta = kTheta;
    p.kv_rows = rows;
    p.k_pool = buf + 2048;
    p.v_pool = buf + 3072;
    return p;
  };
  cpu::AttentionPrep p = base();
  p.n_rot = 15;
  EXPECT_EQ(attention_prep(p, nullptr), cudaErrorInvalidValue);  // odd rotary dim
  p = base();
  p.n_rot = 66;
  EXPECT_EQ(attention_prep(p, nullptr), cudaErrorInvalidValue);  // n_rot > head_dim
  p = base();
  p.q_head_stride = 63;
  EXPECT_EQ(attention_prep(p, nullptr), cudaErrorInvalidValue);  // heads overlap
  p = base();
  p.kv_rows = nullptr;
  EXPECT_EQ(attention_prep(p, nullptr), cudaErrorInvalidValue);
  p = base();
  p.v_pool = p.k_pool;
  EXPECT_EQ(attention_prep(p, nullptr), cudaErrorInvalidValue);
  p = base();
  p.head_dim = kAttentionPrepMaxHeadDim + 1;
  p.q_head_stride = 2 * p.head_dim;
  EXPECT_EQ(attention_prep(p, nullptr), cudaErrorNotSupported);  // rms_norm's block-reduction widths
  p = base();
  p.n_rot = 2 * kMaxRopeHalf + 2;
  p.head_dim = 2 * kMaxRopeHalf + 2;
  p.q_head_stride = p.head_dim;
  EXPECT_EQ(attention_prep(p, nullptr), cudaErrorInvalidValue);  // more frequency slots than the table holds
  p = base();
  p.k = reinterpret_cast<float*>(reinterpret_cast<char*>(buf) + 2);
  EXPECT_EQ(attention_prep(p, nullptr), cudaErrorMisalignedAddress);
  p = base();
  p.n_tokens = 0;
  p.n_rot = 15;
  EXPECT_EQ(attention_prep(p, nullptr), cudaSuccess);  // nothing to do
}

}  // namespace
}  // namespace ds::cuda::test
