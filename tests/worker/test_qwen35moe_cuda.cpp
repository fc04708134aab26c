// The qwen35moe model on the CUDA backend against the HF reference and the CPU backend (skips
// when no CUDA device is visible). The MoE FFN runs the backend's moe_route / moe_experts
// (kernels/cuda/moe.h: device routing, gather-GEMV or grouped expert products in f32).
// Tolerances: f32 prefill mode keeps f32 products (equal to the CPU up to summation order): the
// reference's 1e-3 at every position. The bf16 mode rounds operands of steps past 64 tokens to
// bf16 (~2^-9 relative each, amplified by the random weights, see test_qwen3_cuda.cpp).
// Routing is discontinuous: where a token's k-th and (k+1)-th router logits are nearly tied, the
// bf16 perturbation of the router's input picks another expert, and that token's FFN output (and,
// through attention / GDN state, every later row) moves by far more than rounding. On the CPU
// (issue 32 diagnosis), rand_700's smallest router margins (k-th chosen logit minus the best
// unchosen, per token and MoE layer) are 6.3e-4 (layer 0, token 263) and 6.7e-4 (layer 2, token 2);
// 14 of its 2800 token-layers lie below 1e-2, 51 below 3e-2; rounding the router input (and
// weights) to bf16 alone flips 5 (9) of them, the first at token 2, so every row from 2 on may
// carry a routing flip: the 0.03 bound at rows 63 / 300 / 699 of rand_700 measured those flips
// (0.11 / 0.05 / 0.12 on the H200), not the kernels. The fair per-position check therefore runs
// on a prompt whose routing is robust: rand_700's first kRobustLen ids, where each token whose
// smallest router margin (computed on the CPU from the block taps) is below kMargin is replaced
// (left to right; causality keeps the earlier margins) until none is (56 replacements; its
// smallest margin is then 0.059, and neither bf16 rounding of the router's input and weights nor
// 2^-8 relative noise flips any choice on the CPU; 2^-6 noise is the first to). There the CUDA
// stage's router inputs (rebuilt on the host from its taps) must pick the CPU's experts, and its
// logits stay within 3e-2 of the CPU's at every position (a wrong expert product, combine or
// moe_route still moves them by far more). rand_700 itself is held to a
// flip-tolerant whole-prompt check: the same top-1 wherever the CPU's top-1 margin exceeds
// 0.5, mean KL(cpu || cuda) below 5e-3 and none above 5e-2 (a 0.12 logit error gives
// KL <= 0.12^2 / 2 = 7e-3; a wrong kernel gives O(1) errors and KL far above).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

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
constexpr double kMargin = 0.05;    // router-logit margin kept by the robust prompt (flips seen <= 0.023)
constexpr size_t kRobustLen = 160;  // > 64: the bf16 path

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

// The top-k expert sets [layer][token] (sorted ids) and per-token smallest router margin of `ids`
// run from position 0 on `st` (whose StageOptions::tap fills `taps`): each MoE layer's router
// input is rebuilt on the host as RMSNorm(blk.L.out - blk.L.ffn_out; post_attention_norm) (the
// last "ffn_out" of a layer is the MoE block's), its logits in double from the f32 router.
struct Routing {
  std::vector<std::vector<std::vector<int>>> sets;
  std::vector<double> margin;
};
using Taps = std::map<std::string, std::vector<float>>;
Routing routing_of(const LoadedModel& m, StageModel& st, const Taps& taps, const std::vector<int32_t>& ids) {
  const size_t D = m.config.n_embd, E = m.config.n_expert, k = m.config.n_expert_used, T = ids.size();
  st.drop_all();
  run_prompt(st, 1, ids, {static_cast<uint32_t>(T - 1)});
  Routing r;
  r.margin.assign(T, 1e30);
  for (uint32_t l = 0; l < m.config.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const GgufTensor& rt = m.gguf->tensor(p + "ffn_gate_inp.weight");
    EXPECT_EQ(rt.type, GgmlType::F32);
    const auto* W = reinterpret_cast<const float*>(rt.data);
    const auto* g = reinterpret_cast<const float*>(m.gguf->tensor(p + "post_attention_norm.weight").data);
    const std::vector<float>& out = taps.at(p + "out");
    const std::vector<float>& fo = taps.at(p + "ffn_out");
    r.sets.emplace_back(T);
    std::vector<float> h(D);
    std::vector<double> lg(E);
    std::vector<int> order(E);
    for (size_t t = 0; t < T; ++t) {
      double ss = 0;
      for (size_t i = 0; i < D; ++i) {
        h[i] = out[t * D + i] - fo[t * D + i];
        ss += static_cast<double>(h[i]) * h[i];
      }
      const float s = 1.0f / std::sqrt(static_cast<float>(ss / D) + m.config.rms_eps);
      for (size_t e = 0; e < E; ++e) {
        double a = 0;
        for (size_t i = 0; i < D; ++i) a += static_cast<double>(W[e * D + i]) * ((h[i] * s) * g[i]);
        lg[e] = a;
      }
      for (size_t e = 0; e < E; ++e) order[e] = static_cast<int>(e);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return lg[a] > lg[b]; });
      r.margin[t] = std::min(r.margin[t], lg[order[k - 1]] - lg[order[k]]);
      std::vector<int> set(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
      std::sort(set.begin(), set.end());
      r.sets[l][t] = set;
    }
  }
  return r;
}

std::unique_ptr<StageModel> tapped_stage(const LoadedModel& m, Taps& taps, bool cuda) {
  StageOptions o;
  o.n_threads = 2;
  o.tap = [&taps](const std::string& n, const std::vector<float>& rows, size_t) { taps[n] = rows; };
  const StageRange range{0, m.config.n_layer};
  return cuda ? load_stage(m.gguf, m.config, range, o, make_cuda_backend(0, {.bf16_prefill = true}))
              : load_cpu_stage(m.gguf, m.config, range, o);
}

TEST(Qwen35MoeCuda, Bf16PrefillFollowsTheCpuWhereRoutingIsRobust) {
  DS_REQUIRE_GPU();
  const ReferencePrompt ref = load_reference_prompt("rand_700", "qwen35moe");
  const LoadedModel m = load_data_model("tiny-qwen35moe-q8_0.gguf");
  const size_t V = m.config.n_vocab;
  Taps taps;
  const std::unique_ptr<StageModel> cpu = tapped_stage(m, taps, false);
  std::vector<int32_t> ids(ref.ids.begin(), ref.ids.begin() + kRobustLen);
  uint32_t lcg = 1;
  Routing want_routes;
  for (size_t pass = 0;; ++pass) {
    ASSERT_LT(pass, 20 * kRobustLen) << "no robust prompt found";
    want_routes = routing_of(m, *cpu, taps, ids);
    const auto weak =
        std::find_if(want_routes.margin.begin(), want_routes.margin.end(), [](double x) { return x < kMargin; });
    if (weak == want_routes.margin.end()) break;
    lcg = lcg * 1664525u + 1013904223u;
    ids[weak - want_routes.margin.begin()] = static_cast<int32_t>(lcg % V);
  }
  // The CUDA stage's router inputs (rebuilt on the host the same way) pick the CPU's experts.
  const std::unique_ptr<StageModel> gpu = tapped_stage(m, taps, true);
  const Routing got_routes = routing_of(m, *gpu, taps, ids);
  for (size_t l = 0; l < want_routes.sets.size(); ++l) {
    for (size_t t = 0; t < ids.size(); ++t) {
      ASSERT_EQ(got_routes.sets[l][t], want_routes.sets[l][t]) << "layer " << l << " token " << t;
    }
  }
  cpu->drop_all();
  const std::vector<float> want = run_prompt(*cpu, 2, ids, all_rows(ids.size()));
  const std::vector<float> got = run_prompt(*cuda_stage(m, true), 2, ids, all_rows(ids.size()));
  ASSERT_EQ(got.size(), want.size());
  float worst_all = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    const float* a = got.data() + t * V;
    const float* b = want.data() + t * V;
    float worst = 0;
    for (size_t i = 0; i < V; ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    worst_all = std::max(worst_all, worst);
    EXPECT_LE(worst, kBf16Tol) << "row " << t;
  }
  std::printf("robust prompt: worst logit error %.4g over %zu rows\n", worst_all, ids.size());
}

// KL(p || q) of the softmaxes of two logit rows.
double kl_of_logits(const float* p_logits, const float* q_logits, size_t V) {
  const double lp = cpu::logit_digest(p_logits, V, 1).logsumexp, lq = cpu::logit_digest(q_logits, V, 1).logsumexp;
  double kl = 0;
  for (size_t i = 0; i < V; ++i) {
    const double a = p_logits[i] - lp, b = q_logits[i] - lq;
    kl += std::exp(a) * (a - b);
  }
  return kl;
}

TEST(Qwen35MoeCuda, Bf16PrefillAgreesWithTheCpuOverAWholePromptWithRoutingFlips) {
  DS_REQUIRE_GPU();
  const ReferencePrompt ref = load_reference_prompt("rand_700", "qwen35moe");
  LoadedModel m = load_data_model("tiny-qwen35moe-q8_0.gguf");
  const size_t V = m.config.n_vocab, T = ref.ids.size();
  const std::vector<float> want = run_prompt(*m.stage, 1, ref.ids, all_rows(T));
  const std::vector<float> got = run_prompt(*cuda_stage(m, true), 1, ref.ids, all_rows(T));
  ASSERT_EQ(got.size(), want.size());
  double kl_sum = 0, kl_max = 0;
  for (size_t t = 0; t < T; ++t) {
    const float* a = got.data() + t * V;
    const float* b = want.data() + t * V;
    const double kl = kl_of_logits(b, a, V);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
    EXPECT_LE(kl, 5e-2) << "row " << t;
    const cpu::LogitDigest db = cpu::logit_digest(b, V, 2);
    if (db.top_logits[0] - db.top_logits[1] > 0.5f) {
      EXPECT_EQ(cpu::logit_digest(a, V, 1).top_ids[0], db.top_ids[0]) << "row " << t;
    }
  }
  std::printf("rand_700: mean KL %.3g, max %.3g\n", kl_sum / T, kl_max);
  EXPECT_LE(kl_sum / T, 5e-3);
}

}  // namespace
}  // namespace ds::test
