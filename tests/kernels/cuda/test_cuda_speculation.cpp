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
#include "worker/cuda_backend.h"
#include "worker/speculation.h"

namespace ds::test {
namespace {

constexpr size_t kGenerate = 40;
constexpr float kLogitTol = 1e-3f;

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  uint64_t drafted = 0, accepted = 0;
};

struct CudaModel {
  std::shared_ptr<const GgufFile> gguf;
  ModelConfig config;
  std::unique_ptr<StageModel> stage;
};

CudaModel load_cuda() {
  CudaModel m;
  m.gguf = std::make_shared<const GgufFile>(GgufFile::open(tiny_model_path()));
  m.config = load_model_config(*m.gguf);
  StageOptions o;
  m.stage = load_stage(m.gguf, m.config, {0, m.config.n_layer}, o, make_cuda_backend(0, {.bf16_prefill = false}));
  return m;
}

std::vector<float> row_of(const std::vector<float>& logits, size_t r, size_t V) {
  return {logits.begin() + static_cast<std::ptrdiff_t>(r * V), logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * V)};
}

Generated plain_decode(const std::vector<int32_t>& prompt) {
  CudaModel m = load_cuda();
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

// As tests/worker/test_speculation.cpp, on CUDA: `oracle` replaces the MTP drafts.
Generated spec_decode(const std::vector<int32_t>& prompt, uint32_t K, const std::vector<int32_t>* oracle) {
  CudaModel m = load_cuda();
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
