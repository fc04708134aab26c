// Decode with the small kernels and the GEMVs as programmatic dependent launches
// (CudaAblations::decode_pdl, the default) against the same stage with them off: the
// logits must be bit-identical (no tolerance: the switch changes when kernels may start, never
// what they compute), over single-sequence steps, batched steps of three sequences (batched decode
// attention, conv / GDN over slots) and device-digest steps.
//
// The model: tools/synth at 0.8B layer widths (D 1024: the cluster norms; Q8_0 widths multiple of
// 512: the split-rows GEMV), 4 layers (3 GDN + 1 attention), a 4096-token vocabulary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "common/gguf.h"
#include "common/model_config.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/cuda/synth_model.h"
#include "tests/worker/model_harness.h"
#include "tools/synth/generate.h"
#include "tools/synth/shapes.h"
#include "worker/cuda_backend.h"
#include "worker/stage_model.h"

namespace ds::test {
namespace {

const SynthModel& synth_model() {
  static const SynthModel m = make_small_synth_model("pdl", 13);
  return m;
}

std::unique_ptr<StageModel> load(bool pdl) {
  const SynthModel& m = synth_model();
  StageOptions o;
  return load_stage(m.gguf, m.config, {0, m.config.n_layer}, o,
                    make_cuda_backend(0, {.bf16_prefill = false}, {.decode_pdl = pdl}));
}

std::vector<int32_t> random_ids(size_t n, uint32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = pick(rng);
  return ids;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaModelPdl, DecodeStepsGiveTheSameBitsWithDependentLaunchesOnAndOff) {
  DS_REQUIRE_GPU();
  const uint32_t V = synth_model().config.n_vocab;
  auto on = load(true);
  auto off = load(false);
  constexpr size_t kSeqs = 3;
  std::vector<int32_t> tok(kSeqs);
  std::vector<uint32_t> pos(kSeqs);
  for (size_t i = 0; i < kSeqs; ++i) {
    const std::vector<int32_t> ids = random_ids(20 + 37 * i, V, static_cast<uint32_t>(7 + i));
    const uint32_t last = static_cast<uint32_t>(ids.size() - 1);
    const std::vector<float> a = run_prompt(*on, i + 1, ids, {last});
    const std::vector<float> b = run_prompt(*off, i + 1, ids, {last});
    ASSERT_TRUE(same_bits(a, b)) << "prefill of sequence " << i;
    tok[i] = argmax(b.data(), b.size());
    pos[i] = last + 1;
  }
  // Single-sequence steps of sequence 1 (its logits downloaded), then batched steps of all three.
  for (uint32_t step = 0; step < 6; ++step) {
    StepInput in;
    in.seqs.push_back({1, pos[0], {tok[0]}, {0}});
    StepOutput a, b;
    on->forward(in, &a);
    off->forward(in, &b);
    ASSERT_EQ(a.logits.size(), V);
    EXPECT_TRUE(same_bits(a.logits, b.logits)) << "single-sequence step " << step;
    tok[0] = argmax(b.logits.data(), V);
    ++pos[0];
  }
  for (uint32_t step = 0; step < 6; ++step) {
    StepInput in;
    for (size_t i = 0; i < kSeqs; ++i) in.seqs.push_back({i + 1, pos[i], {tok[i]}, {0}});
    StepOutput a, b;
    on->forward(in, &a);
    off->forward(in, &b);
    ASSERT_EQ(a.logits.size(), kSeqs * V);
    EXPECT_TRUE(same_bits(a.logits, b.logits)) << "batched step " << step;
    for (size_t i = 0; i < kSeqs; ++i) {
      tok[i] = argmax(b.logits.data() + i * V, V);
      ++pos[i];
    }
  }
  // Device digests (greedy and sampled rules): the same digests, field for field.
  for (uint32_t step = 0; step < 4; ++step) {
    StepInput in;
    for (size_t i = 0; i < kSeqs; ++i) {
      in.seqs.push_back({i + 1, pos[i], {tok[i]}, {0}});
      in.digest_rows.push_back(step % 2 == 0 ? DigestRequest{{0.0f, 0, 1.0f}, 0.0}
                                             : DigestRequest{{0.9f, 40, 0.95f}, 0.3 + 0.2 * static_cast<double>(i)});
    }
    StepOutput a, b;
    on->forward(in, &a);
    off->forward(in, &b);
    ASSERT_EQ(a.digests.size(), kSeqs) << "digest step " << step;
    ASSERT_EQ(b.digests.size(), kSeqs);
    for (size_t i = 0; i < kSeqs; ++i) {
      EXPECT_EQ(a.digests[i].top_ids, b.digests[i].top_ids) << "digest step " << step << " sequence " << i;
      EXPECT_EQ(a.digests[i].token, b.digests[i].token);
      EXPECT_EQ(std::memcmp(&a.digests[i].logsumexp, &b.digests[i].logsumexp, sizeof(double)), 0);
      EXPECT_TRUE(same_bits(a.digests[i].top_logprobs, b.digests[i].top_logprobs));
      tok[i] = b.digests[i].token;
      ++pos[i];
    }
  }
}

}  // namespace
}  // namespace ds::test
