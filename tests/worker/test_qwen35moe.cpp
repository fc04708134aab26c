// The qwen35moe forward (hybrid stack + routed/shared-expert FFNs) on the CPU backend against the
// independent HF transformers reference (float32) of the tiny MoE fixture (8 experts, top-2, a
// shared expert, 4 layers): logits at every position within 1e-3 absolute (the qwen35 bound:
// exact Q8_0 dequantisation, f32 compute; the router's softmax and top-k add only f32 rounding,
// and a near-tie between two experts' probabilities could flip a choice, which the reference's
// margins below the bound would show), 16 greedy tokens, and chunked prefill equal to one call.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "kernels/cpu/digest.h"
#include "tests/testutil/reference.h"
#include "tests/worker/model_harness.h"

namespace ds::test {
namespace {

constexpr float kLogitTol = 1e-3f;
constexpr float kTop1Margin = 2e-3f;
const char* const kModel = "tiny-qwen35moe-q8_0.gguf";

TEST(Qwen35Moe, ConfigReadsTheExperts) {
  const LoadedModel m = load_data_model(kModel);
  EXPECT_EQ(m.config.arch, "qwen35moe");
  EXPECT_TRUE(m.config.moe());
  EXPECT_TRUE(m.config.hybrid());
  EXPECT_EQ(m.config.n_expert, 8u);
  EXPECT_EQ(m.config.n_expert_used, 2u);
  EXPECT_EQ(m.config.n_ff_exp, 32u);
  EXPECT_EQ(m.config.n_ff_shexp, 64u);
  EXPECT_EQ(m.config.n_attention_layers(), 1u);  // 3 GDN + 1 attention
  EXPECT_NE(m.config.describe().find("2 of 8 routed"), std::string::npos);
}

class Qwen35MoeReference : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen35MoeReference, EveryPositionMatches) {
  const ReferencePrompt ref = load_reference_prompt(GetParam(), "qwen35moe");
  LoadedModel m = load_data_model(kModel);
  const size_t V = m.config.n_vocab, T = ref.ids.size();
  const std::vector<float> logits = run_prompt(*m.stage, 1, ref.ids, all_rows(T));
  ASSERT_EQ(logits.size(), T * V);
  const LogitsSummary& s = ref.logits;
  for (size_t t = 0; t < T; ++t) {
    const float* row = logits.data() + t * V;
    for (size_t i = 0; i < s.topk_ids[t].size(); ++i) {
      ASSERT_NEAR(row[s.topk_ids[t][i]], s.topk_logits[t][i], kLogitTol) << "pos " << t << " top " << i;
    }
    for (size_t i = 0; i < s.probe_ids.size(); ++i) {
      ASSERT_NEAR(row[s.probe_ids[i]], s.probe_logits[t][i], kLogitTol) << "pos " << t << " probe " << i;
    }
    const cpu::LogitDigest d = cpu::logit_digest(row, V, 16);
    ASSERT_NEAR(d.logsumexp, s.logsumexp[t], kLogitTol) << "pos " << t;
    if (s.topk_logits[t][0] - s.topk_logits[t][1] > kTop1Margin) {
      ASSERT_EQ(d.top_ids[0], s.topk_ids[t][0]) << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Prompts, Qwen35MoeReference, ::testing::Values("rand_64", "rand_700"));

TEST(Qwen35Moe, Greedy16TokensMatch) {
  const ReferencePrompt ref = load_reference_prompt("rand_64", "qwen35moe");
  ASSERT_EQ(ref.greedy_tokens.size(), 16u);
  LoadedModel m = load_data_model(kModel);
  const std::vector<int32_t> got = greedy_tokens(*m.stage, m.config.n_vocab, 7, ref.ids, 16);
  // The smallest reference margin is 4.9e-3, above our ~1e-4 error: all 16 match.
  EXPECT_EQ(got, ref.greedy_tokens);
}

// Routing is per token, so a prefill cut into chunks (and decoding) gives the same bits.
TEST(Qwen35Moe, ChunkedPrefillMatchesOneCall) {
  const ReferencePrompt ref = load_reference_prompt("rand_64", "qwen35moe");
  LoadedModel m = load_data_model(kModel);
  const std::vector<uint32_t> rows = {0, 17, 40, 63};
  const std::vector<float> whole = run_prompt(*m.stage, 1, ref.ids, rows);
  for (size_t chunk : {1, 5, 32}) EXPECT_EQ(run_prompt(*m.stage, 2 + chunk, ref.ids, rows, chunk), whole) << chunk;
}

}  // namespace
}  // namespace ds::test
