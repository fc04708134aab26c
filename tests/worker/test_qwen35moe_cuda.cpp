// The qwen35moe model on the CUDA backend against the HF reference and the CPU backend (skips
// when no CUDA device is visible). The MoE FFN runs the backend's moe_route / moe_experts
// (kernels/cuda/moe.h: device routing, gather-GEMV or grouped expert products in f32).
// Tolerances: f32 prefill mode keeps f32 products (equal to the CPU up to summation order): the
// reference's 1e-3 at every position. The bf16 mode rounds operands of steps past 64 tokens to
// bf16 (~2^-9 relative each, amplified by the random weights, see test_qwen3_cuda.cpp): logits
// within 3e-2 of the CPU's, and the same top-1 wherever the CPU's margin exceeds that.
#include <gtest/gtest.h>

#include <cmath>

#include "common/gguf.h"
#include "common/model_config.h"
#include "kernels/cpu/digest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/testutil/reference.h"
#include "tests/testutil/testutil.h"
#include "tests/worker/model_harness.h"
#include "worker/cuda_backend.h"

namespace ds::test {
namespace {

constexpr float kRefTol = 1e-3f, kBf16Tol = 3e-2f;

std::unique_ptr<StageModel> cuda_stage(const LoadedModel& m, bool bf16) {
  StageOptions o;
  o.n_threads = 2;
  return load_stage(m.gguf, m.config, {0, m.config.n_layer}, o, make_cuda_backend(0, {.bf16_prefill = bf16}));
}

TEST(Qwen35MoeCuda, F32PrefillMatchesTheReferenceEverywhere) {
  DS_REQUIRE_GPU();
  const ReferencePrompt ref = load_reference_prompt("rand_700", "qwen35moe");
  const LoadedModel m = load_data_model("tiny-qwen35moe-q8_0.gguf");
  const size_t V = m.config.n_vocab, T = ref.ids.size();
  const std::vector<float> logits = run_prompt(*cuda_stage(m, false), 1, ref.ids, all_rows(T));
  for (size_t t = 0; t < T; ++t) {
    const float* row = logits.data() + t * V;
    for (size_t i = 0; i < ref.logits.topk_ids[t].size(); ++i) {
      ASSERT_NEAR(row[ref.logits.topk_ids[t][i]], ref.logits.topk_logits[t][i], kRefTol) << t;
    }
    ASSERT_NEAR(cpu::logit_digest(row, V, 1).logsumexp, ref.logits.logsumexp[t], kRefTol) << t;
  }
}

TEST(Qwen35MoeCuda, Bf16PrefillAndDecodeFollowTheCpu) {
  DS_REQUIRE_GPU();
  const ReferencePrompt ref = load_reference_prompt("rand_700", "qwen35moe");
  LoadedModel m = load_data_model("tiny-qwen35moe-q8_0.gguf");
  const size_t V = m.config.n_vocab, T = ref.ids.size();
  const std::vector<uint32_t> rows = {0, 63, 64, 300, static_cast<uint32_t>(T - 1)};
  const std::vector<float> want = run_prompt(*m.stage, 1, ref.ids, rows);
  const std::vector<float> got = run_prompt(*cuda_stage(m, true), 1, ref.ids, rows);
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const float* a = got.data() + r * V;
    const float* b = want.data() + r * V;
    float worst = 0;
    for (size_t i = 0; i < V; ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    EXPECT_LE(worst, kBf16Tol) << "row " << rows[r];
    const cpu::LogitDigest db = cpu::logit_digest(b, V, 2);
    if (db.top_logits[0] - db.top_logits[1] > kBf16Tol) {
      EXPECT_EQ(cpu::logit_digest(a, V, 1).top_ids[0], db.top_ids[0]);
    }
  }
}

}  // namespace
}  // namespace ds::test
