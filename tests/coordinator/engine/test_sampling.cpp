// The sampling rule (common/sampling.h): greedy ties, filtering, inverse CDF, determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

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
