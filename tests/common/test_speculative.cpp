// The speculative acceptance rule: at temperature > 0 the first emitted token follows the
// target's distribution exactly whatever the draft distribution (statistical check); greedy
// acceptance is the longest prefix agreeing with the argmax.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/speculative.h"

namespace ds {
namespace {

double uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

void check_distribution(const SamplingRule& rule) {
  const size_t V = 6;
  // Row 0: the target's prediction of the first draft position; row 1: after it (bonus).
  const std::vector<float> target{2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f, 0.3f, 0.2f, 0.1f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> draft_logits{0.0f, 2.5f, 0.5f, 1.0f, 0.0f, -2.0f};  // disagrees on purpose
  const std::vector<double> p = rule_distribution(target.data(), V, rule);
  const std::vector<double> q = rule_distribution(draft_logits.data(), V, SamplingRule{1.0f, 0, 1.0f});
  std::mt19937_64 rng(7);
  const int n = 200000;
  std::vector<int> count(V, 0);
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t d = draw_from(q, uniform(rng));
    const SpecVerdict v = accept_drafts(target.data(), V, rule, {d}, {q}, {uniform(rng)}, uniform(rng));
    accepted += static_cast<int>(v.accepted);
    ++count[static_cast<size_t>(v.accepted == 1 ? d : v.token)];
  }
  for (size_t t = 0; t < V; ++t) {
    const double sigma = std::sqrt(p[t] * (1 - p[t]) / n) + 1e-12;
    EXPECT_NEAR(static_cast<double>(count[t]) / n, p[t], 5 * sigma + 1e-9) << "token " << t;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, n);
}

TEST(Speculative, RejectionSamplingKeepsTheTargetDistribution) {
  check_distribution(SamplingRule{0.8f, 0, 1.0f});
  check_distribution(SamplingRule{1.0f, 3, 1.0f});
  check_distribution(SamplingRule{1.3f, 0, 0.7f});
}

TEST(Speculative, GreedyAcceptsTheArgmaxPrefix) {
  const size_t V = 4;
  const std::vector<float> target{0, 3, 1, 0, /**/ 5, 0, 0, 0, /**/ 0, 0, 0, 9};
  const SamplingRule greedy;
  SpecVerdict v = accept_drafts(target.data(), V, greedy, {1, 0}, {}, {0.5, 0.5}, 0.5);
  EXPECT_EQ(v.accepted, 2u);
  EXPECT_EQ(v.token, 3);  // bonus
  v = accept_drafts(target.data(), V, greedy, {1, 2}, {}, {0.5, 0.5}, 0.5);
  EXPECT_EQ(v.accepted, 1u);
  EXPECT_EQ(v.token, 0);  // correction
  v = accept_drafts(target.data(), V, greedy, {2, 0}, {}, {0.5, 0.5}, 0.5);
  EXPECT_EQ(v.accepted, 0u);
  EXPECT_EQ(v.token, 1);
}

TEST(Speculative, RuleDistributionMatchesSampleToken) {
  const std::vector<float> logits{0.1f, 2.0f, 2.0f, -1.0f, 0.7f};
  const SamplingRule rule{0.9f, 4, 0.8f};
  const std::vector<double> p = rule_distribution(logits.data(), logits.size(), rule);
  std::mt19937_64 rng(3);
  std::vector<int> count(logits.size(), 0);
  for (int i = 0; i < 100000; ++i)
    ++count[static_cast<size_t>(sample_token(logits.data(), logits.size(), rule, uniform(rng)))];
  for (size_t t = 0; t < p.size(); ++t) EXPECT_NEAR(count[t] / 100000.0, p[t], 0.01) << t;
}

// min_p is part of the rule the acceptance test uses: the same kept set and weights as sample_token.
TEST(Speculative, RuleDistributionHonoursMinP) {
  const std::vector<float> logits{0.1f, 2.0f, 1.9f, -1.0f, 0.7f, 1.2f};
  for (const uint32_t top_k : {0u, 5u}) {
    SamplingRule rule{1.0f, top_k, 1.0f};
    rule.min_p = 0.4f;  // relative to exp(2.0): keeps 2.0, 1.9, 1.2 (0.45), drops 0.7 (0.27) and below
    const std::vector<double> p = rule_distribution(logits.data(), logits.size(), rule);
    EXPECT_EQ(p[0], 0.0);
    EXPECT_EQ(p[3], 0.0);
    EXPECT_EQ(p[4], 0.0);
    // Weights from the float logits (1.9f and 1.2f are not exact), so double rounding alone separates them.
    const auto w = [&](size_t i) { return std::exp(static_cast<double>(logits[i]) - static_cast<double>(logits[1])); };
    const double z = w(1) + w(2) + w(5);
    EXPECT_NEAR(p[1], w(1) / z, 1e-12);
    EXPECT_NEAR(p[5], w(5) / z, 1e-12);
    std::mt19937_64 rng(9);
    std::vector<int> count(logits.size(), 0);
    for (int i = 0; i < 100000; ++i)
      ++count[static_cast<size_t>(sample_token(logits.data(), logits.size(), rule, uniform(rng)))];
    for (size_t t = 0; t < p.size(); ++t) EXPECT_NEAR(count[t] / 100000.0, p[t], 0.01) << t;
  }
}

}  // namespace
}  // namespace ds
