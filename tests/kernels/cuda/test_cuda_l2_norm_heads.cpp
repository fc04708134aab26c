// l2_norm_heads (kernels/cuda/l2_norm_heads.h): every (token, head) row normalised in one launch
// must equal the per-head l2_norm launches it replaces bit for bit (same per-row arithmetic), must
// agree with the CPU l2_norm to f32 rounding (rel 1e-6: the GPU sums squares in f32 lane partials,
// the CPU in double; each output is x_i / |x|, so a wrong row or scale is O(1)), and must leave
// the rest of each token row (the v channels) untouched. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/norm.h"
#include "kernels/cuda/l2_norm_heads.h"
#include "kernels/cuda/norm.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

constexpr float kEps = 1e-6f;

struct HeadsCase {
  size_t tokens, heads, dim, tail;  // tail: floats after the heads in each token row
};

class CudaL2NormHeads : public ::testing::TestWithParam<HeadsCase> {};

TEST_P(CudaL2NormHeads, EqualsPerHeadLaunchesAndTheCpu) {
  DS_REQUIRE_GPU();
  const HeadsCase c = GetParam();
  const size_t stride = c.heads * c.dim + c.tail;
  Rng rng(500 + c.tokens + c.heads + c.dim + c.tail);
  const std::vector<float> x = rng.vec(c.tokens * stride, -2.0f, 2.0f);
  std::vector<float> want_cpu = x;
  for (size_t h = 0; h < c.heads; ++h) {
    cpu::l2_norm(want_cpu.data() + h * c.dim, stride, kEps, c.tokens, c.dim, want_cpu.data() + h * c.dim, stride);
  }
  DeviceArray<float> per_head(x), fused(x);
  for (size_t h = 0; h < c.heads; ++h) {
    float* p = per_head.get() + h * c.dim;
    DS_CUDA_CHECK(l2_norm(p, stride, kEps, c.tokens, c.dim, p, stride, nullptr));
  }
  DS_CUDA_CHECK(l2_norm_heads(fused.get(), stride, c.tokens, c.heads, c.dim, kEps, nullptr));
  const std::vector<float> got = fused.download();
  EXPECT_EQ(got, per_head.download());
  EXPECT_LE(rel_error(got, want_cpu), 1e-6);
  for (size_t t = 0; t < c.tokens; ++t) {
    for (size_t i = c.heads * c.dim; i < stride; ++i)
      ASSERT_EQ(got[t * stride + i], x[t * stride + i]) << t << "," << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaL2NormHeads,
                         ::testing::Values(HeadsCase{300, 32, 128, 4096 + 3},  // 9B: q + k heads, then v
                                           HeadsCase{17, 4, 32, 128},          // the tiny fixture
                                           HeadsCase{1, 6, 100, 0},            // one token, odd head dim
                                           HeadsCase{64, 3, 1000, 5}));        // widest taken

TEST(CudaL2NormHeadsArgs, RefusesWhatItDoesNotTake) {
  // Argument checks only: nothing reaches the device.
  alignas(16) float buf[64] = {};
  EXPECT_EQ(l2_norm_heads(buf, 4096, 2, 2, kL2HeadsMaxDim + 1, kEps, nullptr), cudaErrorNotSupported);
  EXPECT_EQ(l2_norm_heads(nullptr, 256, 2, 2, 128, kEps, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(l2_norm_heads(buf, 255, 2, 2, 128, kEps, nullptr), cudaErrorInvalidValue);  // heads overflow the row
  EXPECT_EQ(l2_norm_heads(reinterpret_cast<float*>(reinterpret_cast<char*>(buf) + 2), 256, 2, 2, 128, kEps, nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(l2_norm_heads(buf, 256, 0, 2, 128, kEps, nullptr), cudaSuccess);  // nothing to do
}

}  // namespace
}  // namespace ds::cuda::test
