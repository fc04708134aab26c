// Batched decode on the fixture model, CUDA backend: three sequences decoded together (one step:
// one batched attention call per attention layer, Backend::attention_batch) against the
// same three decoded one step each on a second stage. Tolerance kLogitTol = 1e-3 (the
// CUDA-vs-CPU budget of test_cuda_model.cpp): attention is bit-identical per sequence, but the
// 3-token decode GEMV runs another kernel variant than the 1-token one (another f32 summation
// order), and the random fixture amplifies rounding ~10^4x.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/gguf.h"
#include "common/model_config.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/testutil/reference.h"
#include "tests/testutil/testutil.h"
#include "tests/worker/model_harness.h"
#include "worker/cuda_backend.h"
#include "worker/stage_model.h"

namespace ds::test {
namespace {

constexpr float kLogitTol = 1e-3f;

std::unique_ptr<StageModel> load_f32_cuda() {
  static const auto gguf = std::make_shared<const GgufFile>(GgufFile::open(tiny_model_path()));
  static const ModelConfig config = load_model_config(*gguf);
  return load_stage(gguf, config, {0, config.n_layer}, StageOptions{}, make_cuda_backend(0, {.bf16_prefill = false}));
}

TEST(CudaModelBatchDecode, OneStepOfThreeEqualsThreeSteps) {
  DS_REQUIRE_GPU();
  const std::vector<std::vector<int32_t>> prompts = {load_reference_prompt("chat_basic").ids,
                                                     load_reference_prompt("rand_200").ids,
                                                     load_reference_prompt("rand_1500").ids};
  auto batched = load_f32_cuda();
  auto separate = load_f32_cuda();
  std::vector<int32_t> tok(prompts.size());
  std::vector<uint32_t> pos(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const uint32_t last = static_cast<uint32_t>(prompts[i].size() - 1);
    run_prompt(*batched, i + 1, prompts[i], {last}, 256);
    const std::vector<float> logits = run_prompt(*separate, i + 1, prompts[i], {last}, 256);
    tok[i] = argmax(logits.data(), logits.size());
    pos[i] = last + 1;
  }
  for (uint32_t step = 0; step < 6; ++step) {
    StepInput together;
    for (size_t i = 0; i < prompts.size(); ++i) together.seqs.push_back({i + 1, pos[i], {tok[i]}, {0}});
    StepOutput a;
    batched->forward(together, &a);
    const size_t V = a.logits.size() / prompts.size();
    for (size_t i = 0; i < prompts.size(); ++i) {
      StepInput alone;
      alone.seqs.push_back({i + 1, pos[i], {tok[i]}, {0}});
      StepOutput b;
      separate->forward(alone, &b);
      ASSERT_EQ(b.logits.size(), V);
      float worst = 0;
      for (size_t j = 0; j < V; ++j) worst = std::max(worst, std::fabs(a.logits[i * V + j] - b.logits[j]));
      EXPECT_LE(worst, kLogitTol) << "step " << step << " sequence " << i;
      tok[i] = argmax(b.logits.data(), V);  // both stages continue with the separate run's token
      ++pos[i];
    }
  }
}

}  // namespace
}  // namespace ds::test
