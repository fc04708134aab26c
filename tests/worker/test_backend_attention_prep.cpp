// Backend::attention_prep's default (the CPU backend's behaviour): an attention layer's q/k head
// RMSNorm + rope and K/V cache write, through the virtual interface, equal bit for bit to the
// reference kernels called one by one on the layer's layout (q heads [query | gate], GQA k/v,
// pool rows out of order), with the gate halves and the other pool rows untouched; inconsistent
// shapes are refused with std::invalid_argument naming the op, before anything is written.
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "tests/kernels/kernel_test_util.h"
#include "worker/backend.h"

namespace ds::test {
namespace {

constexpr float kSentinel = -12345.0f;

// A small GQA layer step: 3 tokens, 4 q heads over 2 kv heads of 16, rotary dim 6 (pairs
// (i, i + 3): the partial rope of the fixture model), positions from 40, pool rows 5, 0, 3 of 7.
struct Step {
  size_t T = 3, H = 4, Hkv = 2, d = 16, n_rot = 6, pool_rows = 7;
  std::array<int32_t, 4> sections{3, 3, 2, 0};
  float theta = 1e7f, eps = 1e-6f;
  std::vector<float> qg, k, v, q_norm, k_norm, k_pool, v_pool;
  std::vector<int32_t> positions;
  std::vector<uint32_t> rows{5, 0, 3};

  Step() {
    cpu::test::Rng rng(31);
    qg = rng.vec(T * H * 2 * d, -2, 2);
    k = rng.vec(T * Hkv * d, -2, 2);
    v = rng.vec(T * Hkv * d, -2, 2);
    q_norm = rng.vec(d, 0.5f, 1.5f);
    k_norm = rng.vec(d, 0.5f, 1.5f);
    k_pool.assign(pool_rows * Hkv * d, kSentinel);
    v_pool.assign(pool_rows * Hkv * d, kSentinel);
    for (size_t s = 0; s < 3; ++s) {
      for (size_t t = 0; t < T; ++t) positions.push_back(40 + static_cast<int32_t>(t + 2 * s));
    }
  }
  AttentionPrep prep() {
    AttentionPrep p;
    p.n_tokens = T;
    p.n_heads = H;
    p.n_kv_heads = Hkv;
    p.head_dim = d;
    p.qg = qg.data();
    p.q_head_stride = 2 * d;
    p.k = k.data();
    p.v = v.data();
    p.q_norm = q_norm.data();
    p.k_norm = k_norm.data();
    p.eps = eps;
    p.n_rot = n_rot;
    p.positions = positions.data();
    p.sections = sections;
    p.theta = theta;
    p.kv_rows = rows.data();
    p.k_pool = k_pool.data();
    p.v_pool = v_pool.data();
    return p;
  }
};

TEST(CpuBackendAttentionPrep, EqualsTheReferenceOpsOneByOne) {
  const std::unique_ptr<Backend> be = make_cpu_backend(2);
  Step got, want;
  be->attention_prep(got.prep());

  const size_t T = want.T, H = want.H, Hkv = want.Hkv, d = want.d, row = Hkv * d;
  cpu::rms_norm(want.qg.data(), 2 * d, want.q_norm.data(), want.eps, T * H, d, want.qg.data(), 2 * d);
  cpu::rms_norm(want.k.data(), d, want.k_norm.data(), want.eps, T * Hkv, d, want.k.data(), d);
  cpu::rope_neox(want.qg.data(), T, 2 * H * d, H, 2 * d, d, want.n_rot, want.positions.data(), want.sections,
                 want.theta);
  cpu::rope_neox(want.k.data(), T, row, Hkv, d, d, want.n_rot, want.positions.data(), want.sections, want.theta);
  for (size_t t = 0; t < T; ++t) {
    for (size_t i = 0; i < row; ++i) {
      want.k_pool[want.rows[t] * row + i] = want.k[t * row + i];
      want.v_pool[want.rows[t] * row + i] = want.v[t * row + i];
    }
  }
  EXPECT_EQ(got.qg, want.qg);
  EXPECT_EQ(got.k, want.k);
  EXPECT_EQ(got.v, Step().v) << "v is only read";
  EXPECT_EQ(got.k_pool, want.k_pool);
  EXPECT_EQ(got.v_pool, want.v_pool);

  // The op did something: gates untouched, queries changed, unused pool rows still sentinels.
  const Step before;
  for (size_t t = 0; t < T; ++t) {
    for (size_t h = 0; h < H; ++h) {
      const size_t head = (t * H + h) * 2 * d;
      EXPECT_NE(got.qg[head], before.qg[head]) << "query of token " << t << " head " << h;
      for (size_t i = d; i < 2 * d; ++i) ASSERT_EQ(got.qg[head + i], before.qg[head + i]) << "gate " << t << "," << h;
    }
  }
  for (uint32_t r : {1u, 2u, 4u, 6u}) EXPECT_EQ(got.k_pool[r * row], kSentinel) << "pool row " << r;
  EXPECT_NE(got.k_pool[5 * row], kSentinel);
}

TEST(CpuBackendAttentionPrep, RefusesInconsistentShapes) {
  const std::unique_ptr<Backend> be = make_cpu_backend(1);
  const auto refuses = [&](const char* what, auto&& spoil) {
    Step s;
    AttentionPrep p = s.prep();
    spoil(p);
    try {
      be->attention_prep(p);
      ADD_FAILURE() << what << ": accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("attention_prep: "), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.qg, Step().qg) << what << ": written before the check";
  };
  refuses("odd n_rot", [](AttentionPrep& p) { p.n_rot = 5; });
  refuses("n_rot > head_dim", [](AttentionPrep& p) { p.n_rot = p.head_dim + 2; });
  refuses("no rope", [](AttentionPrep& p) { p.n_rot = 0; });
  refuses("q head stride < head_dim", [](AttentionPrep& p) { p.q_head_stride = p.head_dim - 1; });
  refuses("no kv heads", [](AttentionPrep& p) { p.n_kv_heads = 0; });
  refuses("no k_norm", [](AttentionPrep& p) { p.k_norm = nullptr; });
  refuses("no positions", [](AttentionPrep& p) { p.positions = nullptr; });
  refuses("one pool for k and v", [](AttentionPrep& p) { p.v_pool = p.k_pool; });

  Step empty;
  AttentionPrep p = empty.prep();
  p.n_tokens = 0;
  p.n_rot = 5;  // an empty step does nothing, whatever else it says
  EXPECT_NO_THROW(be->attention_prep(p));
  EXPECT_EQ(empty.qg, Step().qg);
}

}  // namespace
}  // namespace ds::test
