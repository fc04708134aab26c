// CUDA Gated DeltaNet against the CPU recurrence at the shapes the models use (9B: 16 key / 32
// value heads of 128 x 128), prefill followed by decode steps on the state the device kept, and odd
// shapes of the register-state kernel (dk <= 128: partial row groups, value-column tails) and of the
// fallback (dk > 128).
//
// Tolerance: exact f32 recurrence with a different summation order (8 partial sums per column
// instead of one sequential sum); the update is a contraction (unit keys, beta < 1), so errors stay
// at a few ulp and do not grow with the number of tokens. Same 2e-5 relative bound as
// test_cuda_gdn_attention.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/gdn.h"
#include "kernels/cuda/gdn.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

constexpr double kTol = 2e-5;

struct Case {
  size_t prefill_tokens, decode_steps, nk, nv, dk, dv;
};

struct Inputs {
  GdnShape s;
  std::vector<float> conv, g, beta;
  Inputs(size_t n_tokens, const Case& c, Rng& rng) {
    const size_t C = 2 * c.nk * c.dk + c.nv * c.dv + 5;  // conv row with padding, odd stride
    s = GdnShape{n_tokens, c.nk, c.nv, c.dk, c.dv, C, C};
    conv = rng.vec(n_tokens * C);
    for (size_t t = 0; t < n_tokens; ++t) {
      for (size_t h = 0; h < 2 * c.nk; ++h) normalize(&conv[t * C + h * c.dk], c.dk);
    }
    g = rng.vec(n_tokens * c.nv, -2.0f, -0.005f);
    beta = rng.vec(n_tokens * c.nv, 0.05f, 0.95f);
  }
  static void normalize(float* x, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += double(x[i]) * x[i];
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] / std::sqrt(sum + 1e-6));
  }
};

class CudaGdnModelShapes : public ::testing::TestWithParam<Case> {};

TEST_P(CudaGdnModelShapes, PrefillThenDecodeMatchesCpu) {
  DS_REQUIRE_GPU();
  const Case c = GetParam();
  Rng rng(500 + c.dk + c.dv + c.prefill_tokens);
  std::vector<float> state = rng.vec(c.nv * c.dk * c.dv, -0.5f, 0.5f);
  DeviceArray<float> dstate(state);
  auto step = [&](size_t n_tokens, bool prefill, const char* what) {
    Inputs in(n_tokens, c, rng);
    const size_t koff = c.nk * c.dk, voff = 2 * c.nk * c.dk, out_n = n_tokens * c.nv * c.dv;
    std::vector<float> want(out_n);
    const float* q = in.conv.data();
    cpu::gdn_recurrent(in.s, q, q + koff, q + voff, in.g.data(), in.beta.data(), state.data(), want.data(), nullptr);
    DeviceArray<float> dconv(in.conv), dg(in.g), db(in.beta), dout(out_n);
    dout.upload(std::vector<float>(out_n, NAN));  // every output must be written
    const float* dq = dconv.get();
    const auto launch = prefill ? gdn_prefill : gdn_recurrent;
    DS_CUDA_CHECK(launch(in.s, dq, dq + koff, dq + voff, dg.get(), db.get(), dstate.get(), dout.get(), nullptr));
    const std::vector<float> got = dout.download();
    for (float v : got) ASSERT_FALSE(std::isnan(v)) << what;
    EXPECT_LE(rel_error(got, want), kTol) << what;
    EXPECT_LE(rel_error(dstate.download(), state), kTol) << what;
  };
  if (c.prefill_tokens > 0) step(c.prefill_tokens, true, "prefill");
  for (size_t d = 0; d < c.decode_steps; ++d) step(1, false, "decode");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGdnModelShapes,
                         ::testing::Values(Case{300, 3, 16, 32, 128, 128},  // 9B
                                           Case{64, 2, 16, 48, 128, 128},   // 27B head counts
                                           Case{0, 4, 16, 32, 128, 128},    // decode only
                                           Case{37, 2, 3, 6, 100, 70},      // partial row group, column tail
                                           Case{21, 1, 1, 2, 8, 16},        // tiny dk
                                           Case{9, 1, 1, 2, 200, 24}));     // dk > 128: fallback kernel

}  // namespace
}  // namespace ds::cuda::test
