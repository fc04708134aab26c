// MTP speculative decoding on the CUDA backend (issue 10): verify rows with GDN state captures,
// rewind after a rejection and the MTP draft chain, on one in-process CUDA stage of the fixture.
// Greedy output with speculation must equal plain greedy decoding on the same backend, token for
// token (drafts from the MTP block, and drafts from the plain run with every third one corrupted
// so that partial acceptance, rewinds and bonus tokens all occur). Logits of each emitted token
// are held to 1e-3 of the plain run's (verify rows run the multi-token GDN form, plain decode
// the single-token one; the same budget as CUDA vs CPU in test_cuda_model.cpp). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/gguf.h"
#include "common/model_config.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/testutil/reference.h"
#include "tests/testutil/testutil.h"
#include "tests/worker/model_harness.h"
#include "tests/worker/spec_harness.h"
#include "worker/cuda_backend.h"
#include "worker/speculation.h"

namespace ds::test {
namespace {

constexpr size_t kGenerate = 40;
constexpr float kLogitTol = 1e-3f;

// The fixture as one in-process CUDA stage (f32 prefill, as the plain decode it is compared with).
LoadedModel load_cuda(uint32_t draft_vocab = 0) {
  LoadedModel m;
  m.gguf = std::make_shared<const GgufFile>(GgufFile::open(tiny_model_path()));
  m.config = load_model_config(*m.gguf);
  StageOptions o;
  o.draft_vocab = draft_vocab;
  m.stage = load_stage(m.gguf, m.config, {0, m.config.n_layer}, o, make_cuda_backend(0, {.bf16_prefill = false}));
  return m;
}

Generated plain_decode(const std::vector<int32_t>& prompt) {
  LoadedModel m = load_cuda();
  return greedy_plain_decode(*m.stage, m.config.n_vocab, prompt, kGenerate);
}

Generated spec_decode(const std::vector<int32_t>& prompt, uint32_t K, const std::vector<int32_t>* oracle,
                      bool ask_digests = false, uint32_t draft_vocab = 0) {
  LoadedModel m = load_cuda(draft_vocab);
  return greedy_spec_decode(*m.stage, m.config.n_embd, m.config.n_vocab, prompt, K, oracle, kGenerate, ask_digests);
}

void expect_same(const Generated& want, const Generated& got, const std::string& what) {
  ASSERT_EQ(got.tokens, want.tokens) << what;
  float worst = 0;
  for (size_t i = 0; i < want.logits.size(); ++i) {
    for (size_t v = 0; v < want.logits[i].size(); ++v)
      worst = std::max(worst, std::fabs(got.logits[i][v] - want.logits[i][v]));
  }
  EXPECT_LE(worst, kLogitTol) << what;
}

TEST(CudaSpeculation, GreedyOutputEqualsPlainDecoding) {
  DS_REQUIRE_GPU();
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const Generated want = plain_decode(prompt);
  for (uint32_t K : {1u, 3u, 4u}) {
    const Generated mtp = spec_decode(prompt, K, nullptr);
    expect_same(want, mtp, "MTP drafts, K=" + std::to_string(K));
    const Generated oracle = spec_decode(prompt, K, &want.tokens);
    expect_same(want, oracle, "oracle drafts, K=" + std::to_string(K));
    EXPECT_GT(oracle.accepted, 0u);
    EXPECT_LT(oracle.accepted, oracle.drafted);
  }
}

// Greedy verify rows digested on the device (the worker's path for temperature-0 sequences):
// the verdicts come from the digests' argmax and must still give plain decoding's tokens.
TEST(CudaSpeculation, GreedyOnDeviceDigestsEqualsPlainDecoding) {
  DS_REQUIRE_GPU();
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const Generated want = plain_decode(prompt);
  for (uint32_t K : {1u, 3u}) {
    for (const bool oracle : {false, true}) {
      const std::string what = std::string(oracle ? "oracle" : "MTP") + " drafts, K=" + std::to_string(K);
      const Generated got = spec_decode(prompt, K, oracle ? &want.tokens : nullptr, true);
      EXPECT_EQ(got.tokens, want.tokens) << what;
      EXPECT_GT(got.digested_steps, 0u) << what << ": the device digest was never used";
      if (oracle) {
        EXPECT_GT(got.accepted, 0u) << what;
      }
    }
  }
}

// forward_mtp_last (the drafting call) against forward_mtp's last row on the same rows: logits
// within kLogitTol (the head runs on one row instead of n; the GEMV's per-row result may differ
// in summation order), the same normed hidden, and a greedy digest whose token is that row's
// argmax whenever the row's best two logits are further apart than the tolerance.
TEST(CudaSpeculation, MtpLastRowMatchesForwardMtp) {
  DS_REQUIRE_GPU();
  LoadedModel m = load_cuda();
  const size_t V = m.config.n_vocab, D = m.config.n_embd;
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const std::vector<float> h = mtp_rows_for_prompt(*m.stage, D, 1, prompt);
  std::vector<float> all, all_hidden;
  m.stage->forward_mtp(1, 0, prompt, h.data(), &all, &all_hidden);
  const std::vector<float> want(all.end() - static_cast<std::ptrdiff_t>(V), all.end());
  const std::vector<float> want_h(all_hidden.end() - static_cast<std::ptrdiff_t>(D), all_hidden.end());

  LogitDigest digest;
  std::vector<float> logits, last_h;
  EXPECT_FALSE(m.stage->forward_mtp_last(1, 0, prompt, h.data(), nullptr, &digest, &logits, &last_h));
  ASSERT_EQ(logits.size(), V);
  ASSERT_EQ(last_h.size(), D);
  float worst = 0, worst_h = 0;
  for (size_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(logits[v] - want[v]));
  for (size_t d = 0; d < D; ++d) worst_h = std::max(worst_h, std::fabs(last_h[d] - want_h[d]));
  EXPECT_LE(worst, kLogitTol);
  EXPECT_LE(worst_h, kLogitTol);

  const DigestRequest greedy{};
  ASSERT_TRUE(m.stage->forward_mtp_last(1, 0, prompt, h.data(), &greedy, &digest, &logits, &last_h));
  EXPECT_TRUE(logits.empty());
  std::vector<float> sorted(want);
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  if (sorted[0] - sorted[1] > 2 * kLogitTol) {
    EXPECT_EQ(digest.token, argmax(want.data(), V));
  }
  EXPECT_TRUE(std::isfinite(digest.token_logprob) && digest.token_logprob <= 0.0f);
}

// --draft-vocab on the device: the draft row's head is the first rows of the LM head (an odd
// count, so no kernel may assume a multiple), its logits are the full row's first ids within
// kLogitTol, its greedy digest picks among them, and greedy output stays plain decoding's.
TEST(CudaSpeculation, DraftVocabularyDraftsAmongTheFirstIds) {
  DS_REQUIRE_GPU();
  constexpr uint32_t kDraftVocab = 3001;
  LoadedModel full = load_cuda();
  LoadedModel part = load_cuda(kDraftVocab);
  const size_t V = full.config.n_vocab, D = full.config.n_embd;
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const std::vector<float> h = mtp_rows_for_prompt(*full.stage, D, 1, prompt);
  std::vector<float> all;
  full.stage->forward_mtp(1, 0, prompt, h.data(), &all);
  const std::vector<float> want(all.end() - static_cast<std::ptrdiff_t>(V),
                                all.end() - static_cast<std::ptrdiff_t>(V - kDraftVocab));
  LogitDigest digest;
  std::vector<float> logits, last_h;
  EXPECT_FALSE(part.stage->forward_mtp_last(1, 0, prompt, h.data(), nullptr, &digest, &logits, &last_h));
  ASSERT_EQ(logits.size(), kDraftVocab);
  float worst = 0;
  for (size_t v = 0; v < kDraftVocab; ++v) worst = std::max(worst, std::fabs(logits[v] - want[v]));
  EXPECT_LE(worst, kLogitTol);
  const DigestRequest greedy{};
  ASSERT_TRUE(part.stage->forward_mtp_last(1, 0, prompt, h.data(), &greedy, &digest, &logits, &last_h));
  EXPECT_LT(digest.token, static_cast<int32_t>(kDraftVocab));
  std::vector<float> sorted(want);
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  if (sorted[0] - sorted[1] > 2 * kLogitTol) {
    EXPECT_EQ(digest.token, argmax(want.data(), kDraftVocab));
  }

  const Generated plain = plain_decode(prompt);
  const Generated got = spec_decode(prompt, 3, nullptr, true, kDraftVocab);
  EXPECT_EQ(got.tokens, plain.tokens);
  EXPECT_LT(got.max_draft, static_cast<int32_t>(kDraftVocab));
}

}  // namespace
}  // namespace ds::test
