// Fused decode ops against their CPU twins composed from the existing reference ops.
// add_rms_norm = cpu::add_inplace then cpu::rms_norm. Tolerance: the sum x + delta is exact in
// both (same f32 add); the norm differs only in summation order (CPU: double, GPU: f32 trees),
// a few ulp of the result: 2e-6 relative, as test_cuda_rowwise.cpp.
// conv_silu_l2_token = cpu::causal_conv1d_silu (one token) then cpu::l2_norm over the q/k heads:
// same taps in the same order; SiLU's expf (glibc vs CUDA, <= 2 ulp) and the L2 sum's order
// differ, so 2e-6 relative again; the state update is a pure copy, so bit-exact.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/conv1d.h"
#include "kernels/cpu/norm.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/conv_l2_decode.h"
#include "kernels/cuda/norm.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

struct Shape {
  size_t rows, dim;
};

class CudaAddRmsNorm : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaAddRmsNorm, MatchesAddThenNorm) {
  DS_REQUIRE_GPU();
  const auto [rows, dim] = GetParam();
  Rng rng(5);
  std::vector<float> x = rng.vec(rows * dim, -3, 3);
  const std::vector<float> delta = rng.vec(rows * dim, -3, 3), w = rng.vec(dim, 0.5f, 1.5f);
  DeviceArray<float> dx(x), dd(delta), dw(w), dy(rows * dim);
  ASSERT_EQ(add_rms_norm(dx.get(), dd.get(), dw.get(), 1e-6f, rows, dim, dy.get(), nullptr), cudaSuccess);
  std::vector<float> want_y(rows * dim);
  cpu::add_inplace(x.data(), delta.data(), rows * dim);
  cpu::rms_norm(x.data(), dim, w.data(), 1e-6f, rows, dim, want_y.data(), dim);
  EXPECT_EQ(dx.download(), x);  // the residual stream itself: bit-exact
  EXPECT_LT(rel_error(dy.download(), want_y), 2e-6);
  // Against the separate CUDA ops the bits must be equal: a layer split runs them at the stage
  // boundary, and the logits must not depend on where the model is split.
  DeviceArray<float> sx(rng.vec(rows * dim, -3, 3)), sy(rows * dim);
  std::vector<float> sx_host = sx.download();
  DeviceArray<float> fx(sx_host), fy(rows * dim);
  ASSERT_EQ(add_inplace(sx.get(), dd.get(), rows * dim, nullptr), cudaSuccess);
  ASSERT_EQ(rms_norm(sx.get(), dim, dw.get(), 1e-6f, rows, dim, sy.get(), dim, nullptr), cudaSuccess);
  ASSERT_EQ(add_rms_norm(fx.get(), dd.get(), dw.get(), 1e-6f, rows, dim, fy.get(), nullptr), cudaSuccess);
  EXPECT_EQ(fx.download(), sx.download());
  EXPECT_EQ(fy.download(), sy.download());
}

// Decode rows (1 x 4096 / 5120), a batch, prefill-like, and widths off the block size.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAddRmsNorm,
                         ::testing::Values(Shape{1, 4096}, Shape{1, 5120}, Shape{8, 4096}, Shape{300, 1030},
                                           Shape{3, 17}, Shape{2, 256}));

TEST(CudaAddRmsNormNoGain, MatchesAddThenNorm) {
  DS_REQUIRE_GPU();
  Rng rng(6);
  std::vector<float> x = rng.vec(2 * 4096), delta = rng.vec(2 * 4096);
  DeviceArray<float> dx(x), dd(delta), dy(2 * 4096);
  // y may be delta's buffer (each element is read before it is written).
  ASSERT_EQ(add_rms_norm(dx.get(), dd.get(), nullptr, 1e-6f, 2, 4096, dd.get(), nullptr), cudaSuccess);
  std::vector<float> want(2 * 4096);
  cpu::add_inplace(x.data(), delta.data(), x.size());
  cpu::rms_norm(x.data(), 4096, nullptr, 1e-6f, 2, 4096, want.data(), 4096);
  EXPECT_LT(rel_error(dd.download(), want), 2e-6);
}

TEST(CudaAddRmsNormArgs, RejectsBadArguments) {  // checked before any launch: runs without a GPU
  float* p = reinterpret_cast<float*>(uintptr_t{256});
  float* q = reinterpret_cast<float*>(uintptr_t{512});
  EXPECT_EQ(add_rms_norm(p, q, nullptr, 1e-6f, 1, 8, p, nullptr), cudaErrorInvalidValue);  // y == x
  EXPECT_EQ(add_rms_norm(p, nullptr, nullptr, 1e-6f, 1, 8, q, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(add_rms_norm(nullptr, q, nullptr, 1e-6f, 1, 8, q + 64, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(add_rms_norm(p, q + 64, p + 1, 1e-6f, 1, 8, reinterpret_cast<float*>(uintptr_t{1026}), nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(add_rms_norm(p, q, nullptr, 1e-6f, 0, 8, q, nullptr), cudaSuccess);  // nothing to do
}

struct ConvCase {
  size_t n_norm_heads, n_heads, head_dim, kernel;
};

class CudaConvL2Token : public ::testing::TestWithParam<ConvCase> {};

TEST_P(CudaConvL2Token, MatchesConvThenL2) {
  DS_REQUIRE_GPU();
  const auto [n_norm, n_heads, hd, kernel] = GetParam();
  const size_t C = n_heads * hd;
  Rng rng(9);
  const std::vector<float> x = rng.vec(C, -2, 2), w = rng.vec(C * kernel, -1, 1);
  std::vector<float> state = rng.vec((kernel - 1) * C, -2, 2);
  DeviceArray<float> dx(x), dw(w), ds(std::max<size_t>(state.size(), 1)), dy(C);
  if (!state.empty()) ds.upload(state);
  ASSERT_EQ(conv_silu_l2_token(dx.get(), C, dw.get(), kernel, kernel > 1 ? ds.get() : nullptr, n_norm, hd, 1e-6f,
                               dy.get(), nullptr),
            cudaSuccess);
  std::vector<float> want(C);
  cpu::causal_conv1d_silu(x.data(), C, 1, C, w.data(), kernel, state.empty() ? nullptr : state.data(), want.data());
  cpu::l2_norm(want.data(), hd, 1e-6f, n_norm, hd, want.data(), hd);
  EXPECT_LT(rel_error(dy.download(), want), 2e-6);
  if (!state.empty()) {
    std::vector<float> got_state = ds.download();
    got_state.resize(state.size());
    EXPECT_EQ(got_state, state);  // the shifted history: exact
  }
}

// Qwen3.5 9B (16+16 q/k heads and 32 v heads of 128, 4 taps), a model with every head normed,
// one without norms, short heads, and a single tap (no state).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaConvL2Token,
                         ::testing::Values(ConvCase{32, 64, 128, 4}, ConvCase{3, 3, 64, 4}, ConvCase{0, 5, 32, 3},
                                           ConvCase{4, 7, 32, 2}, ConvCase{2, 4, 256, 1}));

TEST(CudaConvL2TokenArgs, RejectsWhatItCannotTake) {        // checked before any launch: runs without a GPU
  EXPECT_FALSE(conv_silu_l2_token_applies(100, 4, 1, 48));  // head_dim not whole warps
  EXPECT_FALSE(conv_silu_l2_token_applies(96, 4, 1, 64));   // channels not whole heads
  EXPECT_FALSE(conv_silu_l2_token_applies(128, 4, 3, 64));  // more norm heads than heads
  EXPECT_FALSE(conv_silu_l2_token_applies(4096, 4, 1, 2048));
  EXPECT_FALSE(conv_silu_l2_token_applies(128, 0, 1, 64));
  EXPECT_TRUE(conv_silu_l2_token_applies(8192, 4, 32, 128));
  float* p = reinterpret_cast<float*>(uintptr_t{256});
  float* q = reinterpret_cast<float*>(uintptr_t{4096});
  EXPECT_EQ(conv_silu_l2_token(p, 96, q, 4, q, 1, 64, 1e-6f, p + 512, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(conv_silu_l2_token(p, 128, q, 4, nullptr, 1, 64, 1e-6f, p + 512, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(conv_silu_l2_token(p, 128, q, 4, q + 1024, 1, 64, 1e-6f, p, nullptr), cudaErrorInvalidValue);  // y == x
}

}  // namespace
}  // namespace ds::cuda::test
