// The sampling rule (common/sampling.h): greedy ties, filtering, inverse CDF, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/logit_adjust.h"
#include "common/sampling.h"

namespace ds {
namespace {

TEST(Sampling, GreedyPicksArgmaxLowestIdOnTies) {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(sample_token(logits.data(), logits.size(), {}, 0.99), 1);
  EXPECT_EQ(argmax_token(logits.data(), logits.size()), 1);
}

TEST(Sampling, TopKOneIsGreedyForAnyU) {
  const std::vector<float> logits{0.1f, 3.0f, 3.0f, 2.9f};
  SamplingRule p{1.0f, 1, 1.0f};
  for (double u : {0.0, 0.3, 0.999}) EXPECT_EQ(sample_token(logits.data(), logits.size(), p, u), 1);
}

TEST(Sampling, InverseCdfFollowsDescendingOrder) {
  // Equal logits: order is by id, so u walks ids 0,1,2,3 in quarters.
  const std::vector<float> logits(4, 1.0f);
  SamplingRule p{1.0f, 0, 1.0f};
  EXPECT_EQ(sample_token(logits.data(), 4, p, 0.0), 0);
  EXPECT_EQ(sample_token(logits.data(), 4, p, 0.26), 1);
  EXPECT_EQ(sample_token(logits.data(), 4, p, 0.51), 2);
  EXPECT_EQ(sample_token(logits.data(), 4, p, 0.99), 3);
  // Descending logits come first regardless of id.
  const std::vector<float> skew{0.0f, 0.0f, 10.0f};
  EXPECT_EQ(sample_token(skew.data(), 3, p, 0.5), 2);
}

TEST(Sampling, TopPKeepsShortestPrefix) {
  // Probabilities ~ 0.665, 0.245, 0.09 for logits 2, 1, 0.
  const std::vector<float> logits{0.0f, 2.0f, 1.0f};
  SamplingRule p{1.0f, 0, 0.6f};  // only id 1 survives
  for (double u : {0.0, 0.5, 0.999}) EXPECT_EQ(sample_token(logits.data(), 3, p, u), 1);
  p.top_p = 0.8f;  // ids 1 and 2 survive, renormalized: 1 has ~0.73
  EXPECT_EQ(sample_token(logits.data(), 3, p, 0.70), 1);
  EXPECT_EQ(sample_token(logits.data(), 3, p, 0.75), 2);
}

TEST(Sampling, MinPKeepsTokensAtLeastThatLikelyRelativeToTheTop) {
  // Relative probabilities at T=1: exp(0) = 1, exp(-1) = 0.368, exp(-2) = 0.135 for logits 3, 2, 1.
  const std::vector<float> logits{1.0f, 3.0f, 2.0f};
  SamplingRule p{1.0f, 0, 1.0f};
  p.min_p = 0.3f;  // keeps ids 1 and 2 (0.368 >= 0.3), drops id 0 (0.135); id 1 has 1 / 1.368 = 0.731
  EXPECT_EQ(sample_token(logits.data(), 3, p, 0.72), 1);
  EXPECT_EQ(sample_token(logits.data(), 3, p, 0.74), 2);
  EXPECT_EQ(sample_token(logits.data(), 3, p, 0.9999), 2) << "id 0 is never drawn";
  p.min_p = 0.4f;  // only id 1
  for (double u : {0.0, 0.5, 0.9999}) EXPECT_EQ(sample_token(logits.data(), 3, p, u), 1);
  p.temperature = 2.0f;  // relative probabilities exp(-0.5) = 0.607, exp(-1) = 0.368: min_p 0.4 keeps ids 1, 2
  EXPECT_EQ(sample_token(logits.data(), 3, p, 0.9999), 2);
  p.min_p = 0.0f;  // no cut: the last id in rule order is id 0
  EXPECT_EQ(sample_token(logits.data(), 3, p, 0.9999), 0);
}

// The token distribution with min_p (and top_k, top_p around it) against the rule computed
// directly from the logits: chi-square over 200000 draws with fixed seeds. With 7 kept tokens
// (6 degrees of freedom) the 0.999 quantile is 22.46: a wrong cut or order fails by far more.
TEST(Sampling, MinPDistributionFollowsTheFormula) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 1.5f);
  std::vector<float> logits(64);
  for (float& l : logits) l = n(rng);
  SamplingRule rule{0.8f, 20, 0.97f};
  rule.min_p = 0.05f;
  // Direct computation: sort, top_k, weights, min_p threshold, top_p prefix.
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  ids.resize(rule.top_k);
  std::vector<double> w;
  for (int32_t id : ids) w.push_back(std::exp((logits[id] - logits[ids[0]]) / rule.temperature));
  size_t kept = 0;
  while (kept < w.size() && w[kept] >= rule.min_p) ++kept;
  double total = 0, mass = 0;
  for (size_t i = 0; i < kept; ++i) total += w[i];
  size_t nucleus = 0;
  while (mass < rule.top_p * total) mass += w[nucleus++];
  ASSERT_GE(nucleus, 3u) << "the test wants a few kept tokens";
  ASSERT_LT(nucleus, 20u) << "and min_p or top_p to cut";
  std::vector<int> count(logits.size(), 0);
  std::mt19937_64 u_rng(5);
  const int draws = 200000;
  for (int i = 0; i < draws; ++i) {
    const double u = static_cast<double>(u_rng() >> 11) * 0x1.0p-53;
    ++count[static_cast<size_t>(sample_token(logits.data(), logits.size(), rule, u))];
  }
  double chi2 = 0;
  int inside = 0;
  for (size_t i = 0; i < nucleus; ++i) {
    const double expect = draws * w[i] / mass;
    chi2 += (count[ids[i]] - expect) * (count[ids[i]] - expect) / expect;
    inside += count[ids[i]];
  }
  EXPECT_EQ(inside, draws) << "a token outside the min_p / top_p set was drawn";
  EXPECT_LT(chi2, 3.0 * static_cast<double>(nucleus)) << "chi-square " << chi2 << " over " << nucleus << " tokens";
}

TEST(Sampling, LogitEditsScaleBySignThenAdd) {
  std::vector<float> logits{2.0f, -2.0f, 0.0f, 5.0f, 1.0f, -1.0f};  // 2 rows x 3
  const std::vector<LogitEdit> edits{{0, 0, 0.5f, 2.0f, 0.0f},      // positive: x 0.5
                                     {0, 1, 0.5f, 2.0f, 0.25f},     // negative: x 2, then + 0.25
                                     {1, 2, 0.5f, 2.0f, -std::numeric_limits<float>::infinity()}};
  apply_logit_edits(logits.data(), 2, 3, edits.data(), edits.size());
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -3.75f, 0.0f, 5.0f, 1.0f, -std::numeric_limits<float>::infinity()}));
  const LogitEdit outside{2, 0, 1.0f, 1.0f, 1.0f}, bad_id{0, 3, 1.0f, 1.0f, 1.0f};
  EXPECT_THROW(apply_logit_edits(logits.data(), 2, 3, &outside, 1), std::invalid_argument);
  EXPECT_THROW(apply_logit_edits(logits.data(), 2, 3, &bad_id, 1), std::invalid_argument);
}

TEST(Sampling, TemperatureSharpens) {
  const std::vector<float> logits{1.0f, 0.0f};
  SamplingRule hot{1.0f, 0, 1.0f}, cold{0.1f, 0, 1.0f};
  // p(0) = 0.731 at T=1 and ~1 at T=0.1.
  EXPECT_EQ(sample_token(logits.data(), 2, hot, 0.75), 1);
  EXPECT_EQ(sample_token(logits.data(), 2, cold, 0.75), 0);
}

TEST(Sampling, SameInputsSameToken) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 2.0f);
  std::vector<float> logits(1000);
  for (float& l : logits) l = n(rng);
  SamplingRule p{0.8f, 50, 0.9f};
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  for (int i = 0; i < 50; ++i) {
    const double u = uni(rng);
    EXPECT_EQ(sample_token(logits.data(), logits.size(), p, u), sample_token(logits.data(), logits.size(), p, u));
  }
}

TEST(Sampling, DigestTopKAndLogsumexp) {
  const std::vector<float> logits{1.0f, 3.0f, 2.0f, 3.0f, -5.0f};
  const LogitDigest d = digest_logits(logits.data(), logits.size(), {}, 0.0, 3);
  ASSERT_EQ(d.top_ids, (std::vector<int32_t>{1, 3, 2}));
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  EXPECT_NEAR(d.logsumexp, std::log(sum), 1e-12);
  EXPECT_NEAR(d.top_logprobs[0], 3.0 - std::log(sum), 1e-6);
  EXPECT_EQ(d.token, 1);
}

}  // namespace
}  // namespace ds
