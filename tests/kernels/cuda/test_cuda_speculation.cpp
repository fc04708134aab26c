// MTP speculative decoding on the CUDA backend (issue 10): verify rows with GDN state captures,
// rewind after a rejection and the MTP draft chain, on one in-process CUDA stage of the fixture.
// Greedy output with speculation must equal plain greedy decoding on the same backend, token for
// token (drafts from the MTP block, and drafts from the plain run with every third one corrupted
// so that partial acceptance, rewinds and bonus tokens all occur). Logits of each emitted token
// are held to 1e-3 of the plain run's (verify rows run the multi-token GDN form, plain decode
// the single-token one; the same budget as CUDA vs CPU in test_cuda_model.cpp). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

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
LoadedModel load_cuda() {
  LoadedModel m;
  m.gguf = std::make_shared<const GgufFile>(GgufFile::open(tiny_model_path()));
  m.config = load_model_config(*m.gguf);
  StageOptions o;
  m.stage = load_stage(m.gguf, m.config, {0, m.config.n_layer}, o, make_cuda_backend(0, {.bf16_prefill = false}));
  return m;
}

Generated plain_decode(const std::vector<int32_t>& prompt) {
  LoadedModel m = load_cuda();
  return greedy_plain_decode(*m.stage, m.config.n_vocab, prompt, kGenerate);
}

Generated spec_decode(const std::vector<int32_t>& prompt, uint32_t K, const std::vector<int32_t>* oracle) {
  LoadedModel m = load_cuda();
  return greedy_spec_decode(*m.stage, m.config.n_embd, m.config.n_vocab, prompt, K, oracle, kGenerate);
}

void expect_same(const Generated& want, const Generated& got, const std::string& what) {
  ASSERT_EQ(got.tokens, want.tokens) << what;
  float worst = 0;
  for (size_t i = 0; i < want.logits.size(); ++i) {
    for (size_t v = 0; v < want.logits[i].size(); ++v) worst = std::max(worst, std::fabs(got.logits[i][v] - want.logits[i][v]));
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

}  // namespace
}  // namespace ds::test
