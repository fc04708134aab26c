// MTP speculative decoding on one in-process CPU stage (self-managed memory): greedy output
// with K drafts is token for token (and logit for logit) the output of plain decoding, and a
// rejected draft leaves no trace in the GDN state (rewind restores the captured state).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/speculative.h"
#include "tests/testutil/reference.h"
#include "tests/worker/model_harness.h"
#include "tests/worker/spec_harness.h"
#include "worker/speculation.h"

namespace ds::test {
namespace {

constexpr size_t kGenerate = 48;

CacheGeometry with_kv(KvType t) {
  CacheGeometry g;
  g.k_type = g.v_type = t;
  return g;
}

Generated plain_decode(const std::vector<int32_t>& prompt, KvType kv = KvType::kF32) {
  LoadedModel m = load_fixture(false, {0, 0}, with_kv(kv));
  return greedy_plain_decode(*m.stage, m.config.n_vocab, prompt, kGenerate);
}

Generated spec_decode(const std::vector<int32_t>& prompt, uint32_t K, const std::vector<int32_t>* oracle = nullptr,
                      uint32_t draft_vocab = 0, KvType kv = KvType::kF32) {
  LoadedModel m = load_fixture(false, {0, 0}, with_kv(kv), draft_vocab);
  return greedy_spec_decode(*m.stage, m.config.n_embd, m.config.n_vocab, prompt, K, oracle, kGenerate);
}

void expect_same(const Generated& want, const Generated& got) {
  ASSERT_EQ(got.tokens, want.tokens);
  for (size_t i = 0; i < want.logits.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(got.logits[i].data(), want.logits[i].data(), want.logits[i].size() * sizeof(float)))
        << "logits of token " << i << " differ";
  }
}

TEST(Speculation, GreedyMtpDraftsAreLossless) {
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  Clock::time_point t0 = Clock::now();
  const Generated want = plain_decode(prompt);
  std::printf("[spec] K=0: %.1f tokens/s (model load + prefill included)\n", kGenerate / seconds(t0));
  for (uint32_t K = 1; K <= 4; ++K) {
    t0 = Clock::now();
    const Generated got = spec_decode(prompt, K);
    const double s = seconds(t0);
    expect_same(want, got);
    std::printf("[spec] K=%u: %llu drafted, %llu accepted (%.1f %%), %.1f tokens/s\n", K,
                static_cast<unsigned long long>(got.drafted), static_cast<unsigned long long>(got.accepted),
                got.drafted ? 100.0 * static_cast<double>(got.accepted) / static_cast<double>(got.drafted) : 0.0,
                kGenerate / s);
  }
}

// --draft-vocab: drafts pick among the first ids only, and the output stays the plain output.
// The fixture's MTP drafts ids above the limit when it may (so the limit is really in force).
TEST(Speculation, DraftsFromThePartOfTheVocabularyAreLossless) {
  constexpr uint32_t kDraftVocab = 2000;
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const Generated want = plain_decode(prompt);
  const Generated all_ids = spec_decode(prompt, 2);
  ASSERT_GE(all_ids.max_draft, static_cast<int32_t>(kDraftVocab)) << "the check below could not fail";
  for (uint32_t K : {1u, 3u}) {
    const Generated got = spec_decode(prompt, K, nullptr, kDraftVocab);
    expect_same(want, got);
    EXPECT_GE(got.max_draft, 0);
    EXPECT_LT(got.max_draft, static_cast<int32_t>(kDraftVocab)) << "K=" << K;
  }
}

// Drafts that are mostly right: accepted prefixes, rejections mid-span and all-accepted
// bonus tokens all occur; every rewind must restore the GDN state bit for bit, else later
// logits would differ.
TEST(Speculation, RollbackAfterPartialAcceptanceIsBitExact) {
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const Generated want = plain_decode(prompt);
  for (uint32_t K : {1u, 3u, 4u}) {
    const Generated got = spec_decode(prompt, K, &want.tokens);
    expect_same(want, got);
    EXPECT_GT(got.accepted, 0u);
    EXPECT_LT(got.accepted, got.drafted);
  }
}

// The same with each KV cache type: rejected drafts' rows are overwritten, never read.
class SpeculationKv : public ::testing::TestWithParam<KvType> {};

TEST_P(SpeculationKv, RollbackAfterPartialAcceptanceIsBitExact) {
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const Generated want = plain_decode(prompt, GetParam());
  const Generated got = spec_decode(prompt, 3, &want.tokens, 0, GetParam());
  expect_same(want, got);
  EXPECT_GT(got.accepted, 0u);
  EXPECT_LT(got.accepted, got.drafted);
}

INSTANTIATE_TEST_SUITE_P(Types, SpeculationKv,
                         ::testing::Values(KvType::kBf16, KvType::kF16, KvType::kQ8_0, KvType::kFp8, KvType::kQ4r),
                         [](const ::testing::TestParamInfo<KvType>& i) { return std::string(kv_type_name(i.param)); });

TEST(Speculation, RewindNeedsACapturedPosition) {
  LoadedModel m = load_fixture();
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  run_prompt(*m.stage, 1, prompt, {});
  const auto n = static_cast<uint32_t>(prompt.size());
  StepInput in;
  in.seqs.push_back({1, n - 2, {5}, {0}});
  in.seqs.back().rewind = true;  // nothing was captured
  StepOutput out;
  EXPECT_THROW(m.stage->forward(in, &out), ConfigError);
  in.seqs.back() = SeqStep{1, n, {5, 6, 7, 8, 9, 10}, {0}};
  in.seqs.back().n_draft = 5;  // more than StatePool::kMaxCaptures
  EXPECT_THROW(m.stage->forward(in, &out), ConfigError);
}

// Temperature 1: the first token emitted after speculating is distributed exactly as the
// target's own sampling distribution p (lossless rejection sampling), with the real model's
// p (target row after the prompt + y) and two draft rows q (below: the MTP block's row for the
// same position, and a perturbed copy of the target's).
// Design: N = 20000 trials with fresh uniform numbers (draft d ~ q, accept with u < p/q,
// else draw from max(0, p - q)); Pearson chi-square of the emitted counts against N p over
// the bins with N p >= 5 (the rest merged into one bin), rejected at alpha = 1e-3 (critical
// value by the Wilson-Hilferty approximation). The seeds are fixed, so the test is
// deterministic; over random seeds a correct rule would fail one run in 1000. Power check:
// the same statistic for the drafts themselves (q without the correction) must be rejected.
// top_k = 50 keeps both distributions on 50 tokens, so restricting the two logits rows to the
// union of their top 64 ids gives exactly the same distributions on a 128-id vocabulary (the
// rule only looks at the top 50), which keeps 20000 trials fast.
double chi_square_critical(double df, double z) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

struct ChiSquare {
  double statistic = 0.0;
  double df = 0.0;
};

ChiSquare chi_square(const std::vector<uint64_t>& counts, const std::vector<double>& p, uint64_t n) {
  std::vector<double> expected, observed;
  double rest_e = 0.0, rest_o = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    if (e >= 5.0) {
      expected.push_back(e);
      observed.push_back(static_cast<double>(counts[i]));
    } else {
      rest_e += e;
      rest_o += static_cast<double>(counts[i]);
    }
  }
  if (rest_e >= 5.0 || expected.empty()) {
    expected.push_back(rest_e);
    observed.push_back(rest_o);
  } else {  // a too small rest joins the largest bin
    const size_t big = static_cast<size_t>(std::max_element(expected.begin(), expected.end()) - expected.begin());
    expected[big] += rest_e;
    observed[big] += rest_o;
  }
  ChiSquare c;
  for (size_t i = 0; i < expected.size(); ++i) {
    c.statistic += (observed[i] - expected[i]) * (observed[i] - expected[i]) / std::max(expected[i], 1e-9);
  }
  c.df = static_cast<double>(expected.size()) - 1.0;
  return c;
}

std::vector<float> top_ids_union(const std::vector<float>& a, const std::vector<float>& b, std::vector<size_t>* ids) {
  std::vector<size_t> order(a.size());
  for (const std::vector<float>* row : {&a, &b}) {
    std::iota(order.begin(), order.end(), size_t{0});
    std::partial_sort(order.begin(), order.begin() + 64, order.end(),
                      [row](size_t x, size_t y) { return (*row)[x] > (*row)[y]; });
    for (size_t i = 0; i < 64; ++i) {
      if (std::find(ids->begin(), ids->end(), order[i]) == ids->end()) ids->push_back(order[i]);
    }
  }
  std::vector<float> out;
  for (size_t id : *ids) out.push_back(a[id]);
  return out;
}

// One chi-square run (see above): target row `target`, draft row `draft`; at least
// `min_accept` of the drafts must be accepted (so that path is really exercised).
void check_first_token_distribution(const char* what, const std::vector<float>& target, const std::vector<float>& draft,
                                    double min_accept) {
  std::vector<size_t> sub;
  const std::vector<float> t_sub = top_ids_union(target, draft, &sub);
  std::vector<float> q_sub;
  for (size_t id : sub) q_sub.push_back(draft[id]);
  SamplingRule rule;
  rule.temperature = 1.0f;
  rule.top_k = 50;
  const std::vector<double> p = rule_distribution(t_sub.data(), sub.size(), rule);
  const std::vector<double> q = rule_distribution(q_sub.data(), sub.size(), rule);
  double tv = 0.0;
  for (size_t i = 0; i < p.size(); ++i) tv += 0.5 * std::abs(p[i] - q[i]);

  constexpr uint64_t kTrials = 20000;
  std::mt19937_64 rng(20261129);
  auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  std::vector<float> rows(t_sub);
  rows.insert(rows.end(), t_sub.begin(), t_sub.end());  // row 1 (the bonus row) plays no part in the first token
  std::vector<uint64_t> emitted(sub.size(), 0), drafted(sub.size(), 0);
  uint64_t accepted = 0;
  for (uint64_t t = 0; t < kTrials; ++t) {
    const int32_t d = draw_from(q, uniform());
    const double u_accept = uniform(), u_final = uniform();
    const SpecVerdict v = accept_drafts(rows.data(), sub.size(), rule, {d}, {q}, {u_accept}, u_final);
    ++emitted[static_cast<size_t>(v.accepted ? d : v.token)];
    ++drafted[static_cast<size_t>(d)];
    accepted += v.accepted;
  }
  const ChiSquare c = chi_square(emitted, p, kTrials);
  const double critical = chi_square_critical(c.df, 3.0902);  // z of the upper 0.1 % tail
  const double accept_rate = static_cast<double>(accepted) / kTrials;
  std::printf(
      "[spec] T=1, %s drafts: total variation(p, q) %.3f, %.1f %% accepted, chi2 %.1f on %.0f df "
      "(critical %.1f)\n",
      what, tv, 100.0 * accept_rate, c.statistic, c.df, critical);
  EXPECT_GT(c.df, 5.0) << what;
  EXPECT_LT(c.statistic, critical) << what;
  EXPECT_GE(accept_rate, min_accept) << what;
  ASSERT_GT(tv, 0.1) << what << ": p and q too close for the power check";
  const ChiSquare drafts_only = chi_square(drafted, p, kTrials);
  EXPECT_GT(drafts_only.statistic, chi_square_critical(drafts_only.df, 3.0902)) << what << ": cannot tell q from p";
}

TEST(Speculation, TemperatureOneEmitsTheTargetDistribution) {
  LoadedModel m = load_fixture();
  const size_t V = m.config.n_vocab, D = m.config.n_embd;
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const auto n = static_cast<uint32_t>(prompt.size());
  std::vector<float> hidden;
  const std::vector<float> logits = run_prompt(*m.stage, 1, prompt, all_rows(n), 0, &hidden);
  const int32_t y = argmax(logits.data() + (n - 1) * V, V);
  // Target row after y.
  StepInput in;
  in.seqs.push_back({1, n, {y}, {0}});
  StepOutput out;
  m.stage->forward(in, &out);
  const std::vector<float> target = out.logits;
  // MTP row for the same position: rows (x_i, h_{i-1}) for the prompt and y, as the catch-up runs them.
  std::vector<int32_t> ids = prompt;
  ids.push_back(y);
  std::vector<float> h((n + 1) * D, 0.0f);
  std::copy(hidden.begin(), hidden.begin() + static_cast<std::ptrdiff_t>(n * D),
            h.begin() + static_cast<std::ptrdiff_t>(D));
  std::vector<float> mtp;
  m.stage->forward_mtp(1, 0, ids, h.data(), &mtp);
  const std::vector<float> draft_row(mtp.end() - static_cast<std::ptrdiff_t>(V), mtp.end());

  // The fixture's MTP block is untrained: its top 50 rarely meets the target's, so every draft
  // is rejected and only the residual draw is exercised. A second draft row, the target's own
  // logits plus Gaussian noise (fixed seed; sd a quarter of the spread of its top 50 logits, so
  // the top 50 sets overlap partly), shares part of p: both acceptance and the residual draw
  // then shape the emitted distribution.
  std::vector<float> sorted(target);
  std::nth_element(sorted.begin(), sorted.begin() + 49, sorted.end(), std::greater<float>());
  const float spread = *std::max_element(target.begin(), target.end()) - sorted[49];
  std::vector<float> perturbed(target);
  std::mt19937_64 noise_rng(7);
  std::normal_distribution<float> noise(0.0f, 0.25f * spread);
  for (float& x : perturbed) x += noise(noise_rng);
  check_first_token_distribution("mtp", target, draft_row, 0.0);
  check_first_token_distribution("perturbed target", target, perturbed, 0.1);
  // A draft vocabulary (--draft-vocab) makes q zero above an id: the residual draw must then
  // bring back all of p's mass there. Cut at the median id of the target's top 50.
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), size_t{0});
  std::partial_sort(order.begin(), order.begin() + 50, order.end(),
                    [&](size_t a, size_t b) { return target[a] > target[b]; });
  std::vector<size_t> top(order.begin(), order.begin() + 50);
  std::nth_element(top.begin(), top.begin() + 25, top.end());
  std::vector<float> first_ids_only(perturbed);
  for (size_t v = top[25]; v < V; ++v) first_ids_only[v] = -std::numeric_limits<float>::infinity();
  check_first_token_distribution("perturbed target, first ids only", target, first_ids_only, 0.05);
}

// forward_mtp_last (the drafting call: head on the last row only) against forward_mtp's last
// row. The CPU backend has no device digest: a digest request is declined and the logits come
// back. Tolerance 1e-4: the head's matmul over 1 row instead of n may sum in another order.
TEST(Speculation, MtpLastRowMatchesForwardMtp) {
  LoadedModel m = load_fixture();
  const size_t V = m.config.n_vocab, D = m.config.n_embd;
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const auto n = static_cast<uint32_t>(prompt.size());
  const std::vector<float> h = mtp_rows_for_prompt(*m.stage, D, 1, prompt);
  std::vector<float> all, all_hidden;
  m.stage->forward_mtp(1, 0, prompt, h.data(), &all, &all_hidden);
  const DigestRequest greedy{};
  LogitDigest digest;
  std::vector<float> logits, last_h;
  EXPECT_FALSE(m.stage->forward_mtp_last(1, 0, prompt, h.data(), &greedy, &digest, &logits, &last_h));
  ASSERT_EQ(logits.size(), V);
  ASSERT_EQ(last_h.size(), D);
  for (size_t v = 0; v < V; ++v) ASSERT_NEAR(logits[v], all[(n - 1) * V + v], 1e-4f) << "logit " << v;
  for (size_t d = 0; d < D; ++d) ASSERT_NEAR(last_h[d], all_hidden[(n - 1) * D + d], 1e-4f) << "hidden " << d;
}

// With a draft vocabulary the last row's logits are the first draft_vocab of the full row (the
// head's first rows; same tolerance and reason as above), and a larger limit means every id.
TEST(Speculation, DraftVocabularyLogitsAreTheFullRowsFirstIds) {
  constexpr uint32_t kDraftVocab = 4096;
  LoadedModel full = load_fixture();
  LoadedModel part = load_fixture(false, {0, 0}, {}, kDraftVocab);
  LoadedModel over = load_fixture(false, {0, 0}, {}, 1u << 30);
  const size_t V = full.config.n_vocab, D = full.config.n_embd;
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const auto n = static_cast<uint32_t>(prompt.size());
  const std::vector<float> h = mtp_rows_for_prompt(*full.stage, D, 1, prompt);
  std::vector<float> all, all_hidden;
  full.stage->forward_mtp(1, 0, prompt, h.data(), &all, &all_hidden);
  LogitDigest digest;
  std::vector<float> logits, last_h, over_logits;
  part.stage->forward_mtp_last(1, 0, prompt, h.data(), nullptr, &digest, &logits, &last_h);
  over.stage->forward_mtp_last(1, 0, prompt, h.data(), nullptr, &digest, &over_logits, &last_h);
  ASSERT_EQ(logits.size(), kDraftVocab);
  ASSERT_EQ(over_logits.size(), V);
  for (size_t v = 0; v < kDraftVocab; ++v) ASSERT_NEAR(logits[v], all[(n - 1) * V + v], 1e-4f) << "logit " << v;
  std::vector<float> full_mtp;
  part.stage->forward_mtp(1, 0, prompt, h.data(), &full_mtp);
  EXPECT_EQ(full_mtp.size(), n * V) << "forward_mtp keeps the whole vocabulary";
}

}  // namespace
}  // namespace ds::test
