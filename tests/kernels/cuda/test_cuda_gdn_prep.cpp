// The v3 prep of the chunked GDN prefill (GdnPrep::kV3, kernels/cuda/gdn_chunked_prep.cu) against
// the CPU token recurrence (the exact oracle) and against the v2 prep on the same inputs, at the
// shapes it takes (dk = dv = 128, 16-byte aligned rows): partial and exact chunks, one token,
// several scratch segments, the 27B head counts; and calls it does not take (odd row stride)
// fall back to v2.
//
// Tolerances (rel_error: max |got - want| / max |want|):
//   vs the CPU recurrence kRecTol = 2e-5, the bound test_cuda_gdn_chunked.cpp holds v2 to (v2
//   measured at most 1.9e-6 on the GPU: docs/history/performance-2026-11.md): v3 computes the same
//   sums in the same order.
//   vs v2 kV2Tol = 1e-6: identical operands and summation order; only the compiler's
//   multiply-add contraction may differ (e^gam Q - P W is an fma in v2, a product then a
//   difference in v3): an ulp (6e-8) per term, a few ulp after the triangular products. A wrong
//   row, mask, decay or scratch slot is O(1). Fallback to v2: bit-for-bit equal (same kernel).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu/gdn.h"
#include "kernels/cuda/gdn_chunked.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

constexpr double kRecTol = 2e-5;
constexpr double kV2Tol = 1e-6;

struct PrepCase {
  std::vector<size_t> pieces;  // token counts of consecutive calls on one state
  size_t nk, nv;
  size_t pad;  // floats after each conv row: 4 keeps rows 16-byte aligned (v3 runs), 3 does not
};

// q | k | v rows of `n` tokens with unit-norm q and k heads (as after the model's L2 norms).
struct PrepInputs {
  GdnShape s;
  std::vector<float> conv, g, beta;
  PrepInputs(size_t n, const PrepCase& c, Rng& rng) {
    const size_t d = 128, C = 2 * c.nk * d + c.nv * d + c.pad;
    s = GdnShape{n, c.nk, c.nv, d, d, C, C};
    conv = rng.vec(n * C);
    for (size_t t = 0; t < n; ++t) {
      for (size_t h = 0; h < 2 * c.nk; ++h) {
        float* x = &conv[t * C + h * d];
        double sum = 0;
        for (size_t i = 0; i < d; ++i) sum += double(x[i]) * x[i];
        for (size_t i = 0; i < d; ++i) x[i] = static_cast<float>(x[i] / std::sqrt(sum + 1e-6));
      }
    }
    g = rng.vec(n * c.nv, -1.5f, -0.005f);
    beta = rng.vec(n * c.nv, 0.05f, 0.95f);
  }
};

// One chunked call with `prep` on device copies of `in`; returns the output, updates `state`.
std::vector<float> run(const PrepInputs& in, GdnPrep prep, DeviceArray<float>* state) {
  const size_t out_n = in.s.n_tokens * in.s.n_v_heads * in.s.dv;
  DeviceArray<float> dconv(in.conv), dg(in.g), db(in.beta), dout(out_n);
  dout.upload(std::vector<float>(out_n, NAN));  // every output must be written
  const float* q = dconv.get();
  const size_t koff = in.s.n_k_heads * in.s.dk;
  DS_CUDA_CHECK(gdn_chunked_with_prep(prep, in.s, q, q + koff, q + 2 * koff, dg.get(), db.get(), state->get(),
                                      dout.get(), nullptr));
  return dout.download();
}

class CudaGdnPrepV3 : public ::testing::TestWithParam<PrepCase> {};

TEST_P(CudaGdnPrepV3, MatchesCpuRecurrenceAndV2) {
  DS_REQUIRE_GPU();
  const PrepCase c = GetParam();
  Rng rng(4100 + c.nv + c.pad + c.pieces[0]);
  std::vector<float> state = rng.vec(c.nv * 128 * 128, -0.5f, 0.5f);
  DeviceArray<float> state_v3(state), state_v2(state);
  for (size_t p = 0; p < c.pieces.size(); ++p) {
    const std::string what = "piece " + std::to_string(p) + " (" + std::to_string(c.pieces[p]) + " tokens)";
    const PrepInputs in(c.pieces[p], c, rng);
    std::vector<float> want(c.pieces[p] * c.nv * 128);
    const float* q = in.conv.data();
    const size_t koff = c.nk * 128;
    cpu::gdn_recurrent(in.s, q, q + koff, q + 2 * koff, in.g.data(), in.beta.data(), state.data(), want.data(),
                       nullptr);
    const std::vector<float> v3 = run(in, GdnPrep::kV3, &state_v3);
    const std::vector<float> v2 = run(in, GdnPrep::kV2, &state_v2);
    for (float v : v3) ASSERT_TRUE(std::isfinite(v)) << what;
    EXPECT_LE(rel_error(v3, want), kRecTol) << what;
    EXPECT_LE(rel_error(state_v3.download(), state), kRecTol) << what;
    if (c.pad % 4 == 0) {
      EXPECT_LE(rel_error(v3, v2), kV2Tol) << what;
      EXPECT_LE(rel_error(state_v3.download(), state_v2.download()), kV2Tol) << what;
    } else {  // v3 does not take unaligned rows: the same v2 kernel ran twice
      EXPECT_EQ(v3, v2) << what;
      EXPECT_EQ(state_v3.download(), state_v2.download()) << what;
    }
    std::printf("[ gdn prep v3 ] nv %zu pad %zu %s: out rel %.2g (recurrent) %.2g (v2)\n", c.nv, c.pad, what.c_str(),
                rel_error(v3, want), rel_error(v3, v2));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGdnPrepV3,
    ::testing::Values(PrepCase{{300, 64, 1}, 16, 32, 4},  // 9B: partial chunk, exact chunk, one token
                      PrepCase{{2000}, 16, 32, 4},        // 9B: more chunks than one scratch segment
                      PrepCase{{130}, 16, 48, 4},         // 27B head counts
                      PrepCase{{150}, 16, 32, 3}));       // unaligned rows: falls back to v2

}  // namespace
}  // namespace ds::cuda::test
