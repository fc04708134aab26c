// Logit adjustments (common/logit_adjust.h): the folded edits of penalties, biases and masks
// against a direct transcription of the rules (vLLM's order), and the token history's counts
// against a recount from scratch after writes that roll positions back (rejected drafts).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "common/logit_adjust.h"
#include "common/sampling.h"

namespace ds {
namespace {

// The rules written out on one row: repetition penalty over ids at positions [0, next_pos),
// then frequency and presence over the generated ones, then the biases; the mask last.
std::vector<float> reference_row(std::vector<float> l, const LogitAdjust& a, const std::vector<int32_t>& tokens,
                                 uint32_t next_pos) {
  std::map<int32_t, uint32_t> generated;
  std::set<int32_t> seen;
  for (uint32_t p = 0; p < next_pos; ++p) {
    seen.insert(tokens[p]);
    if (p >= a.prompt_len) ++generated[tokens[p]];
  }
  for (const int32_t id : seen) {
    float& x = l[static_cast<size_t>(id)];
    x = x > 0 ? x / a.repetition_penalty : x * a.repetition_penalty;
  }
  for (const auto& [id, c] : generated) {
    l[static_cast<size_t>(id)] -= static_cast<float>(c) * a.frequency_penalty + a.presence_penalty;
  }
  for (const auto& [id, b] : a.bias) l[static_cast<size_t>(id)] += b;
  if (next_pos < a.prompt_len + a.min_tokens) {
    for (const int32_t id : a.masked) l[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
  }
  return l;
}

TEST(LogitAdjust, FoldedEditsFollowTheRules) {
  constexpr uint32_t kVocab = 50;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> logit(-8.0f, 8.0f);
  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  for (int trial = 0; trial < 200; ++trial) {
    LogitAdjust a;
    a.prompt_len = 1 + static_cast<uint32_t>(trial % 7);
    a.repetition_penalty = trial % 3 == 0 ? 1.0f : 0.5f + static_cast<float>(trial % 5) * 0.3f;
    a.frequency_penalty = static_cast<float>(trial % 4) * 0.5f - 0.5f;
    a.presence_penalty = static_cast<float>(trial % 5) * 0.4f - 0.8f;
    a.bias = {{3, 2.5f}, {token(rng) % 3 + 10, -100.0f}, {40, 1.0f}};
    a.min_tokens = static_cast<uint32_t>(trial % 4);
    a.masked = {3, 7, 40};
    if (trial % 2 == 1) {  // more than the 16 folded in place: the merge path
      a.bias.clear();
      for (int32_t id = 1; id < static_cast<int32_t>(kVocab); id += 2)
        a.bias.push_back({id, 0.25f * static_cast<float>(id % 7) - 0.5f});
    }
    std::vector<int32_t> tokens(a.prompt_len + 12);
    for (auto& t : tokens) t = token(rng);
    TokenHistory h(a.prompt_len);
    h.write(0, tokens.data(), tokens.size());
    for (uint32_t next_pos = a.prompt_len; next_pos <= tokens.size(); ++next_pos) {
      std::vector<float> row(kVocab);
      for (auto& x : row) x = logit(rng);
      h.count_to(next_pos);
      std::vector<LogitEdit> edits;
      append_adjust_edits(a, &h, 0, next_pos, &edits);
      std::set<int32_t> ids;
      for (const LogitEdit& e : edits) EXPECT_TRUE(ids.insert(e.id).second) << "one edit per id";
      std::vector<float> got = row;
      apply_logit_edits(got.data(), 1, kVocab, edits.data(), edits.size());
      const std::vector<float> want = reference_row(row, a, tokens, next_pos);
      for (uint32_t v = 0; v < kVocab; ++v) {
        if (std::isinf(want[v])) {
          EXPECT_EQ(got[v], want[v]) << "trial " << trial << " id " << v;
        } else {
          // x * (1 / r) against x / r, and the adds in another order: a few ulps of |x| <= 108.
          EXPECT_NEAR(got[v], want[v], 4e-5f) << "trial " << trial << " pos " << next_pos << " id " << v;
        }
      }
    }
  }
}

// Sampled through the folded edits, tokens follow softmax(rules(logits) / T) computed directly:
// a chi-square test over 200,000 draws with a fixed seed (bound 3 x df: far in the tail of the
// distribution for a correct sampler, and a wrong penalty sign or bias moves it by thousands).
TEST(LogitAdjust, SampledDistributionFollowsTheFormulas) {
  constexpr uint32_t kVocab = 12;
  const std::vector<float> logits{1.0f, 0.5f, -0.2f, 0.8f, 0.1f, 2.0f, -1.0f, 0.3f, 0.9f, -0.5f, 0.0f, 1.2f};
  LogitAdjust a;
  a.prompt_len = 3;
  a.repetition_penalty = 1.3f;
  a.frequency_penalty = 0.4f;
  a.presence_penalty = 0.6f;
  a.bias = {{2, 1.5f}, {5, -100.0f}};
  a.min_tokens = 8;
  a.masked = {11};
  const std::vector<int32_t> tokens{0, 3, 8, 0, 0, 7, 3};  // prompt 0 3 8, generated 0 0 7 3
  const auto next_pos = static_cast<uint32_t>(tokens.size());
  TokenHistory h(a.prompt_len);
  h.write(0, tokens.data(), tokens.size());
  h.count_to(next_pos);
  std::vector<LogitEdit> edits;
  append_adjust_edits(a, &h, 0, next_pos, &edits);
  std::vector<float> edited = logits;
  apply_logit_edits(edited.data(), 1, kVocab, edits.data(), edits.size());
  const std::vector<float> want_logits = reference_row(logits, a, tokens, next_pos);
  const SamplingRule rule{0.8f, 0, 1.0f, 0.0f};
  std::vector<double> p(kVocab);
  double z = 0;
  for (uint32_t v = 0; v < kVocab; ++v) z += p[v] = std::exp(static_cast<double>(want_logits[v]) / rule.temperature);
  for (double& x : p) x /= z;
  std::vector<int> count(kVocab, 0);
  std::mt19937_64 u_rng(17);
  constexpr int kDraws = 200000;
  for (int i = 0; i < kDraws; ++i) {
    const double u = static_cast<double>(u_rng() >> 11) * 0x1.0p-53;
    ++count[static_cast<size_t>(sample_token(edited.data(), kVocab, rule, u))];
  }
  EXPECT_EQ(count[11], 0) << "masked until min_tokens";
  double chi2 = 0;
  int df = -1;
  for (uint32_t v = 0; v < kVocab; ++v) {
    const double expect = kDraws * p[v];
    if (expect < 5.0) {  // the banned id (bias -100) and the masked one: essentially never drawn
      EXPECT_LE(count[v], 1) << "id " << v;
      continue;
    }
    chi2 += (count[v] - expect) * (count[v] - expect) / expect;
    ++df;
  }
  EXPECT_LT(chi2, 3.0 * df) << "chi-square " << chi2 << " on " << df << " degrees of freedom";
}

TEST(LogitAdjust, BiasAndMaskWithoutPenaltiesNeedNoHistory) {
  LogitAdjust a;
  a.prompt_len = 4;
  a.bias = {{1, 3.0f}, {5, -2.0f}};
  a.min_tokens = 2;
  a.masked = {5, 9};
  std::vector<LogitEdit> edits;
  append_adjust_edits(a, nullptr, 3, 5, &edits);  // one token generated: masks on
  ASSERT_EQ(edits.size(), 3u);
  EXPECT_EQ(edits[0].id, 1);
  EXPECT_EQ(edits[0].add, 3.0f);
  EXPECT_EQ(edits[1].id, 5);
  EXPECT_TRUE(std::isinf(edits[1].add) && edits[1].add < 0);  // the mask wins over the bias
  EXPECT_EQ(edits[2].id, 9);
  for (const LogitEdit& e : edits) EXPECT_EQ(e.row, 3u);
  edits.clear();
  append_adjust_edits(a, nullptr, 0, 6, &edits);  // two generated: only the biases
  ASSERT_EQ(edits.size(), 2u);
  EXPECT_EQ(edits[1].add, -2.0f);
  a.presence_penalty = 1.0f;
  EXPECT_THROW(append_adjust_edits(a, nullptr, 0, 6, &edits), std::invalid_argument);
}

// Counts after any sequence of writes (each from a position already known) and count_to calls
// equal a recount of the tokens now held.
TEST(TokenHistory, CountsFollowRollbacks) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> token(0, 9);
  const uint32_t prompt_len = 5;
  TokenHistory h(prompt_len);
  for (int step = 0; step < 300; ++step) {
    const uint32_t start = h.size() == 0 ? 0 : static_cast<uint32_t>(rng() % (h.size() + 1));
    std::vector<int32_t> t(1 + rng() % 4);
    for (auto& x : t) x = token(rng);
    h.write(start, t.data(), t.size());
    const uint32_t end = static_cast<uint32_t>(rng() % (h.size() + 1));
    h.count_to(end);
    std::map<int32_t, uint32_t> all, gen;
    for (uint32_t p = 0; p < end; ++p) {
      ++all[h.tokens()[p]];
      if (p >= prompt_len) ++gen[h.tokens()[p]];
    }
    std::map<int32_t, uint32_t> got_all, got_gen;
    int32_t last = -1;
    for (const TokenHistory::IdCount& c : h.counts()) {
      ASSERT_GT(c.id, last) << "sorted, unique";
      last = c.id;
      got_all[c.id] = c.all;
      if (c.generated > 0) got_gen[c.id] = c.generated;
    }
    ASSERT_EQ(got_all, all) << "step " << step;
    ASSERT_EQ(got_gen, gen) << "step " << step;
  }
  EXPECT_THROW(h.write(static_cast<uint32_t>(h.size()) + 1, nullptr, 0), std::invalid_argument);
  EXPECT_THROW(h.count_to(static_cast<uint32_t>(h.size()) + 1), std::invalid_argument);
  h.reset({4, 4, 2});
  h.count_to(3);
  ASSERT_EQ(h.counts().size(), 2u);
  EXPECT_EQ(h.counts()[1].id, 4);
  EXPECT_EQ(h.counts()[1].all, 2u);
  EXPECT_EQ(h.counts()[0].generated + h.counts()[1].generated, 0u);  // all three inside the prompt
}

}  // namespace
}  // namespace ds
