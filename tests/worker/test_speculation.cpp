// MTP speculative decoding on one in-process CPU stage (self-managed memory): greedy output
// with K drafts is token for token (and logit for logit) the output of plain decoding, and a
// rejected draft leaves no trace in the GDN state (rewind restores the captured state).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "common/error.h"
#include "tests/testutil/reference.h"
#include "tests/worker/model_harness.h"
#include "worker/speculation.h"

namespace ds::test {
namespace {

constexpr size_t kGenerate = 48;

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // the target row each token was taken from
  uint64_t drafted = 0, accepted = 0;
};

std::vector<float> row_of(const std::vector<float>& logits, size_t r, size_t V) {
  return {logits.begin() + static_cast<std::ptrdiff_t>(r * V), logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * V)};
}

Generated plain_decode(const std::vector<int32_t>& prompt) {
  LoadedModel m = load_fixture();
  const size_t V = m.config.n_vocab;
  Generated g;
  std::vector<float> logits = run_prompt(*m.stage, 1, prompt, {static_cast<uint32_t>(prompt.size() - 1)});
  for (size_t i = 0; i < kGenerate; ++i) {
    g.logits.push_back(logits);
    g.tokens.push_back(argmax(logits.data(), V));
    StepInput in;
    in.seqs.push_back({1, static_cast<uint32_t>(prompt.size() + i), {g.tokens.back()}, {0}});
    StepOutput out;
    m.stage->forward(in, &out);
    logits = out.logits;
  }
  return g;
}

// `oracle`: when set, drafts come from it (with every third one corrupted) instead of the
// MTP block, so acceptance paths are exercised even though the fixture's MTP rarely agrees.
Generated spec_decode(const std::vector<int32_t>& prompt, uint32_t K, const std::vector<int32_t>* oracle = nullptr) {
  LoadedModel m = load_fixture();
  const size_t V = m.config.n_vocab;
  SpecDecoder spec(*m.stage, m.config.n_embd, V);
  Generated g;
  SeqStep step{1, 0, prompt, {static_cast<uint32_t>(prompt.size() - 1)}};
  uint32_t corrupt = 0;
  while (g.tokens.size() < kGenerate) {
    StepInput in;
    in.seqs.push_back(step);
    in.all_final_hidden = true;
    StepOutput out;
    m.stage->forward(in, &out);
    SpecRowInput r;
    r.seq_id = 1;
    r.start_pos = step.start_pos;
    r.tokens = step.token_ids;
    r.n_draft = step.n_draft;
    r.target_logits = out.logits.data();
    r.final_hidden = out.final_hidden.data();
    r.spec_k = K;
    r.u_accept.assign(step.n_draft, 0.5);
    r.u_draft.assign(K, 0.5);
    const SpecRowOutput o = spec.run(r);
    g.drafted += step.n_draft;
    g.accepted += o.accepted;
    const size_t first = step.token_ids.size() - 1 - step.n_draft;
    for (uint32_t j = 0; j < o.accepted; ++j) {
      g.tokens.push_back(step.token_ids[first + 1 + j]);
      g.logits.push_back(row_of(out.logits, j, V));
    }
    g.tokens.push_back(o.token);
    g.logits.push_back(row_of(out.logits, o.accepted, V));
    const uint32_t next = step.start_pos + static_cast<uint32_t>(step.token_ids.size()) - step.n_draft + o.accepted;
    std::vector<int32_t> drafts = o.drafts;
    if (oracle != nullptr) {
      drafts.clear();
      for (uint32_t j = 0; j < K && g.tokens.size() + j < oracle->size(); ++j) {
        const int32_t t = (*oracle)[g.tokens.size() + j];
        drafts.push_back(++corrupt % 3 == 0 ? (t + 1) % static_cast<int32_t>(V) : t);
      }
    }
    step = SeqStep{1, next, {o.token}, {}};
    step.token_ids.insert(step.token_ids.end(), drafts.begin(), drafts.end());
    for (uint32_t j = 0; j < step.token_ids.size(); ++j) step.logit_rows.push_back(j);
    step.n_draft = static_cast<uint32_t>(drafts.size());
    step.rewind = o.accepted < r.n_draft;
  }
  g.tokens.resize(kGenerate);
  g.logits.resize(kGenerate);
  return g;
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

}  // namespace
}  // namespace ds::test
