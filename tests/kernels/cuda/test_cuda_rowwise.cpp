// Row-wise and elementwise CUDA ops against their CPU twins (kernels/cpu) on random inputs with
// odd sizes and strides. Tolerances: the formulas are the same, so only rounding differs — the
// CPU sums squares in double and uses glibc expf/cosf, the GPU sums in f32 trees and uses CUDA's
// (<= 2 ulp) libm — giving errors of a few ulp of the result; we allow ~16 ulp (2e-6 relative).
#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/conv1d.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/gdn.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

constexpr double kUlpTol = 2e-6;

// Rows of `dim` inside rows of `stride` (the gaps hold garbage that must survive untouched).
struct StridedCase {
  size_t rows, dim, stride;
};

class CudaNorm : public ::testing::TestWithParam<StridedCase> {};

TEST_P(CudaNorm, RmsNormMatchesCpu) {
  DS_REQUIRE_GPU();
  const auto [rows, dim, stride] = GetParam();
  Rng rng(1);
  const std::vector<float> x = rng.vec(rows * stride, -3, 3), w = rng.vec(dim, 0.5f, 1.5f);
  std::vector<float> want = rng.vec(rows * stride);
  DeviceArray<float> dx(x), dw(w), dy(want);  // y starts with the same garbage in the gaps
  cpu::rms_norm(x.data(), stride, w.data(), 1e-6f, rows, dim, want.data(), stride);
  DS_CUDA_CHECK(rms_norm(dx.get(), stride, dw.get(), 1e-6f, rows, dim, dy.get(), stride, nullptr));
  EXPECT_LE(rel_error(dy.download(), want), kUlpTol);
}

TEST_P(CudaNorm, RmsNormInPlaceWithoutGain) {
  DS_REQUIRE_GPU();
  const auto [rows, dim, stride] = GetParam();
  Rng rng(2);
  std::vector<float> want = rng.vec(rows * stride, -2, 2);
  DeviceArray<float> dx(want);
  cpu::rms_norm(want.data(), stride, nullptr, 1e-6f, rows, dim, want.data(), stride);
  DS_CUDA_CHECK(rms_norm(dx.get(), stride, nullptr, 1e-6f, rows, dim, dx.get(), stride, nullptr));
  EXPECT_LE(rel_error(dx.download(), want), kUlpTol);
}

TEST_P(CudaNorm, L2NormInPlaceMatchesCpu) {
  DS_REQUIRE_GPU();
  const auto [rows, dim, stride] = GetParam();
  Rng rng(3);
  std::vector<float> want = rng.vec(rows * stride);
  DeviceArray<float> dx(want);
  cpu::l2_norm(want.data(), stride, 1e-6f, rows, dim, want.data(), stride);
  DS_CUDA_CHECK(l2_norm(dx.get(), stride, 1e-6f, rows, dim, dx.get(), stride, nullptr));
  EXPECT_LE(rel_error(dx.download(), want), kUlpTol);
}

TEST_P(CudaNorm, GatedRmsNormMatchesCpu) {
  DS_REQUIRE_GPU();
  const auto [rows, dim, stride] = GetParam();
  (void)stride;  // contiguous rows by contract
  Rng rng(4);
  const std::vector<float> o = rng.vec(rows * dim, -2, 2), z = rng.vec(rows * dim, -4, 4), w = rng.vec(dim);
  std::vector<float> want(rows * dim);
  DeviceArray<float> d_o(o), dz(z), dw(w), dy(rows * dim);
  cpu::gated_rms_norm(o.data(), z.data(), w.data(), 1e-6f, rows, dim, want.data());
  DS_CUDA_CHECK(gated_rms_norm(d_o.get(), dz.get(), dw.get(), 1e-6f, rows, dim, dy.get(), nullptr));
  EXPECT_LE(rel_error(dy.download(), want), kUlpTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaNorm,
                         ::testing::Values(StridedCase{1, 1, 1}, StridedCase{7, 33, 40}, StridedCase{64, 128, 256},
                                           StridedCase{5, 1000, 1003}, StridedCase{300, 64, 64},
                                           // block-per-row path (dim >= 1024): the 9B/27B hidden rows
                                           // at decode, a padded stride, a width that is not a
                                           // multiple of the 256 threads, the smallest wide row.
                                           StridedCase{1, 4096, 4096}, StridedCase{3, 5120, 5200},
                                           StridedCase{4, 1030, 1031}, StridedCase{2, 1024, 1024}));

// ---- rope ----------------------------------------------------------------------------------------

struct RopeCase {
  size_t n_tokens, n_heads, head_dim, n_rot;
  std::array<int32_t, 4> sections;
  int32_t first_pos;
};

class CudaRope : public ::testing::TestWithParam<RopeCase> {};

// Same inputs, interleaved layout [token][head][2*d] (query half rotated, gate half untouched).
TEST_P(CudaRope, MatchesCpu) {
  DS_REQUIRE_GPU();
  const RopeCase c = GetParam();
  const size_t hs = 2 * c.head_dim, ts = c.n_heads * hs;
  Rng rng(5);
  std::vector<float> want = rng.vec(c.n_tokens * ts);
  std::vector<int32_t> pos(3 * c.n_tokens);
  for (size_t s = 0; s < 3; ++s) {
    for (size_t t = 0; t < c.n_tokens; ++t) pos[s * c.n_tokens + t] = c.first_pos + static_cast<int32_t>(t + 5 * s);
  }
  DeviceArray<float> dx(want);
  DeviceArray<int32_t> dpos(pos);
  cpu::rope_neox(want.data(), c.n_tokens, ts, c.n_heads, hs, c.head_dim, c.n_rot, pos.data(), c.sections, 1e7f);
  DS_CUDA_CHECK(
      rope_neox(dx.get(), c.n_tokens, ts, c.n_heads, hs, c.head_dim, c.n_rot, dpos.get(), c.sections, 1e7f, nullptr));
  // Inputs in [-1, 1]: an absolute bound of a few ulp of 1 (cos/sin of the same f32 angle).
  EXPECT_LE(max_abs_diff(dx.download(), want), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaRope,
                         ::testing::Values(RopeCase{1, 1, 64, 16, {3, 3, 2, 0}, 0},
                                           RopeCase{37, 4, 64, 16, {3, 3, 2, 0}, 11},
                                           RopeCase{5, 8, 256, 64, {11, 11, 10, 0}, 200000},
                                           RopeCase{9, 3, 128, 128, {0, 0, 0, 0}, 1000},
                                           RopeCase{3, 2, 80, 30, {2, 2, 1, 0}, 7}));

// ---- elementwise -----------------------------------------------------------------------------------

TEST(CudaActivation, SwigluMatchesCpuAndMayAlias) {
  DS_REQUIRE_GPU();
  const size_t n = 100003;
  Rng rng(6);
  const std::vector<float> gate = rng.vec(n, -8, 8), up = rng.vec(n, -2, 2);
  std::vector<float> want(n);
  cpu::swiglu(gate.data(), up.data(), n, want.data());
  DeviceArray<float> dg(gate), du(up);
  DS_CUDA_CHECK(swiglu(dg.get(), du.get(), n, dg.get(), nullptr));
  EXPECT_LE(rel_error(dg.download(), want), kUlpTol);
}

TEST(CudaActivation, SigmoidGateStridedMatchesCpu) {
  DS_REQUIRE_GPU();
  const size_t rows = 29, dim = 64, xs = 64, gs = 128, ys = 70;
  Rng rng(7);
  const std::vector<float> x = rng.vec(rows * xs), gate = rng.vec(rows * gs, -6, 6);
  std::vector<float> want = rng.vec(rows * ys);
  DeviceArray<float> dx(x), dg(gate), dy(want);
  cpu::sigmoid_gate(x.data(), xs, gate.data(), gs, rows, dim, want.data(), ys);
  DS_CUDA_CHECK(sigmoid_gate(dx.get(), xs, dg.get(), gs, rows, dim, dy.get(), ys, nullptr));
  EXPECT_LE(rel_error(dy.download(), want), kUlpTol);
}

TEST(CudaActivation, AddIsExact) {
  DS_REQUIRE_GPU();
  const size_t n = 4099;
  Rng rng(8);
  std::vector<float> y = rng.vec(n);
  const std::vector<float> x = rng.vec(n);
  DeviceArray<float> dy(y), dx(x);
  cpu::add_inplace(y.data(), x.data(), n);
  DS_CUDA_CHECK(add_inplace(dy.get(), dx.get(), n, nullptr));
  EXPECT_EQ(dy.download(), y);  // one IEEE addition per element on both sides
}

TEST(CudaGdnGates, MatchCpuFormula) {
  DS_REQUIRE_GPU();
  const size_t T = 13, nv = 6, as = 9, bs = 11;
  Rng rng(9);
  const std::vector<float> alpha = rng.vec(T * as, -30, 30), beta_raw = rng.vec(T * bs, -6, 6);
  const std::vector<float> a = rng.vec(nv, -3, -0.1f), dt = rng.vec(nv);
  std::vector<float> want_g(T * nv), want_b(T * nv);
  for (size_t t = 0; t < T; ++t) {  // the CPU backend's loop
    for (size_t n = 0; n < nv; ++n) {
      want_g[t * nv + n] = a[n] * cpu::softplus(alpha[t * as + n] + dt[n]);
      want_b[t * nv + n] = cpu::sigmoid(beta_raw[t * bs + n]);
    }
  }
  DeviceArray<float> d_alpha(alpha), d_beta_raw(beta_raw), da(a), ddt(dt), dg(T * nv), db(T * nv);
  DS_CUDA_CHECK(
      gdn_gates(d_alpha.get(), as, d_beta_raw.get(), bs, da.get(), ddt.get(), T, nv, dg.get(), db.get(), nullptr));
  EXPECT_LE(rel_error(dg.download(), want_g), kUlpTol);
  EXPECT_LE(rel_error(db.download(), want_b), kUlpTol);
}

// ---- conv1d ------------------------------------------------------------------------------------------

struct ConvCase {
  size_t n_tokens, channels, kernel, x_stride;
};

class CudaConv : public ::testing::TestWithParam<ConvCase> {};

// Two consecutive calls (the second continues from the state the first left) so the state
// hand-over is covered, including steps shorter than the history.
TEST_P(CudaConv, OutputAndStateMatchCpu) {
  DS_REQUIRE_GPU();
  const ConvCase c = GetParam();
  Rng rng(10);
  const size_t hist = c.kernel - 1;
  const std::vector<float> w = rng.vec(c.channels * c.kernel);
  std::vector<float> state = rng.vec(hist * c.channels);
  DeviceArray<float> dw(w), dstate(state);
  for (int call = 0; call < 2; ++call) {
    const std::vector<float> x = rng.vec(c.n_tokens * c.x_stride, -3, 3);
    std::vector<float> want(c.n_tokens * c.channels);
    DeviceArray<float> dx(x), dy(want.size());
    cpu::causal_conv1d_silu(x.data(), c.x_stride, c.n_tokens, c.channels, w.data(), c.kernel, state.data(),
                            want.data());
    DS_CUDA_CHECK(causal_conv1d_silu(dx.get(), c.x_stride, c.n_tokens, c.channels, dw.get(), c.kernel, dstate.get(),
                                     dy.get(), nullptr));
    EXPECT_LE(rel_error(dy.download(), want), kUlpTol) << "call " << call;
    EXPECT_EQ(dstate.download(), state) << "call " << call;  // raw inputs copied, bit for bit
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaConv,
                         ::testing::Values(ConvCase{1, 256, 4, 256}, ConvCase{2, 77, 4, 80}, ConvCase{37, 256, 4, 300},
                                           ConvCase{5, 33, 1, 33}, ConvCase{9, 100, 6, 100},
                                           // 4 taps in token runs: 16-byte lanes, several runs and a
                                           // partial one; a stride that is not a multiple of 4 floats
                                           ConvCase{70, 1024, 4, 1032}, ConvCase{33, 2052, 4, 2052},
                                           ConvCase{20, 64, 4, 66}));

}  // namespace
}  // namespace ds::cuda::test
