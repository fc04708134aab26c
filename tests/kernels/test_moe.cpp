// The MoE router (kernels/cpu/moe.h) against a float64 reference: softmax over all experts,
// the k most probable (lower index first on ties), renormalised. Tolerance 1e-6 relative on the
// weights (f32 exp and division against double); the choices must agree exactly (the random
// logits keep every gap far above f32 rounding), and ties go to the lower index.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/moe.h"
#include "tests/kernels/kernel_test_util.h"

namespace ds::cpu {
namespace {

TEST(MoeRoute, MatchesFloat64Reference) {
  test::Rng rng(11);
  for (const auto& [E, k] : {std::pair{8, 2}, std::pair{256, 8}, std::pair{512, 10}, std::pair{4, 4}}) {
    const size_t T = 7;
    const std::vector<float> logits = rng.vec(T * E, -4, 4);
    std::vector<int32_t> experts(T * k);
    std::vector<float> weights(T * k);
    moe_route(logits.data(), T, E, k, experts.data(), weights.data());
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> p(E);
      double mx = -1e300, sum = 0;
      for (size_t e = 0; e < size_t(E); ++e) mx = std::max(mx, double(logits[t * E + e]));
      for (size_t e = 0; e < size_t(E); ++e) sum += p[e] = std::exp(double(logits[t * E + e]) - mx);
      std::vector<int32_t> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
      double picked = 0;
      for (size_t j = 0; j < size_t(k); ++j) picked += p[order[j]];
      double total = 0;
      for (size_t j = 0; j < size_t(k); ++j) {
        ASSERT_EQ(experts[t * k + j], order[j]) << "E=" << E << " t=" << t << " j=" << j;
        ASSERT_NEAR(weights[t * k + j], p[order[j]] / picked, 1e-6 * (p[order[j]] / picked)) << E;
        total += weights[t * k + j];
      }
      EXPECT_NEAR(total, 1.0, 1e-6);
    }
  }
}

TEST(MoeRoute, TiesGoToTheLowerExpert) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f};
  int32_t experts[2];
  float weights[2];
  moe_route(logits.data(), 1, 5, 2, experts, weights);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 2);
  EXPECT_FLOAT_EQ(weights[0], 0.5f);
  EXPECT_FLOAT_EQ(weights[1], 0.5f);
}

}  // namespace
}  // namespace ds::cpu
