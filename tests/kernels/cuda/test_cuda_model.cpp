// The qwen35 fixture on the CUDA backend against the independent HF reference (float32) and the
// CPU backend.
//
// Tolerances: this first CUDA path is all-f32 like the CPU path — the same dequantized weights and
// formulas, different summation orders, libm ulps and GDN form (exact recurrence here, chunked on
// the CPU) — so it is held to the CPU test's budget: logits within kLogitTol = 1e-3 absolute of
// the reference (logit scale ~0.65). Whenever both sides are within kLogitTol, the argmax cannot
// differ where the reference's top-1 margin exceeds 2*kLogitTol, so top-1 must match there, and
// greedy decoding must match up to the first step whose reference margin is below 2*kLogitTol (all
// 32 steps on the fixture, whose smallest margin is 4.2e-3).
// CUDA vs CPU logits: also kLogitTol. The fixture's random weights amplify f32 rounding: on the CPU
// alone, the chunked and recurrent GDN forms give logits up to 1e-4 (rand_200) and 3.5e-4
// (rand_1500) apart, and the CPU path is itself up to 2.9e-4 from the reference on rand_1500; the
// CUDA path lands at the same level (3.2e-4 from the CPU on rand_200, all rows), so a tighter bound
// would test rounding luck, not correctness.
// Two GPU stages vs one: the same kernels on the same rows, bit-identical (1e-6 allowed).
// Every stage here asks for f32 prefill products (the backend's default is bf16 tensor cores, bounded
// on a well-conditioned synthetic model in test_cuda_model_bf16.cpp instead).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/gguf.h"
#include "common/model_config.h"
#include "kernels/cpu/digest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/testutil/reference.h"
#include "tests/testutil/testutil.h"
#include "tests/worker/model_harness.h"
#include "worker/cuda_backend.h"
#include "worker/daemon/stage_handoff.h"
#include "worker/stage_model.h"

namespace ds::test {
namespace {

constexpr float kLogitTol = 1e-3f;
constexpr float kTop1Margin = 2 * kLogitTol;
constexpr float kCpuTol = kLogitTol;
constexpr float kStageTol = 1e-6f;

struct Fixture {
  std::shared_ptr<const GgufFile> gguf;
  ModelConfig config;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.gguf = std::make_shared<const GgufFile>(GgufFile::open(tiny_model_path()));
    x.config = load_model_config(*x.gguf);
    return x;
  }();
  return f;
}

// One stage over [first, last) (last == 0: the whole stack) on CUDA device 0 or on the CPU.
std::unique_ptr<StageModel> load(bool cuda, uint32_t first = 0, uint32_t last = 0) {
  const Fixture& f = fixture();
  StageOptions o;
  o.n_threads = 2;
  const StageRange range{first, last == 0 ? f.config.n_layer : last};
  if (!cuda) return load_cpu_stage(f.gguf, f.config, range, o);
  return load_stage(f.gguf, f.config, range, o, make_cuda_backend(0, {.bf16_prefill = false}));
}

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

// Logits of the reference's top-16 and probe ids, log-sum-exp and (margin permitting) top-1 at
// every position. Returns the largest logit error seen.
float expect_summary_matches(const LogitsSummary& ref, const std::vector<float>& logits, size_t vocab,
                             const std::string& what) {
  float worst = 0;
  EXPECT_EQ(logits.size(), ref.topk_ids.size() * vocab) << what;
  if (logits.size() != ref.topk_ids.size() * vocab) return INFINITY;
  for (size_t t = 0; t < ref.topk_ids.size(); ++t) {
    const float* row = logits.data() + t * vocab;
    for (size_t i = 0; i < ref.topk_ids[t].size(); ++i) {
      worst = std::max(worst, std::fabs(row[ref.topk_ids[t][i]] - ref.topk_logits[t][i]));
    }
    for (size_t i = 0; i < ref.probe_ids.size(); ++i) {
      worst = std::max(worst, std::fabs(row[ref.probe_ids[i]] - ref.probe_logits[t][i]));
    }
    const cpu::LogitDigest d = cpu::logit_digest(row, vocab, 16);
    EXPECT_NEAR(d.logsumexp, ref.logsumexp[t], kLogitTol) << what << " pos " << t;
    if (ref.topk_logits[t][0] - ref.topk_logits[t][1] > kTop1Margin) {
      EXPECT_EQ(d.top_ids[0], ref.topk_ids[t][0]) << what << " pos " << t;
    }
  }
  EXPECT_LE(worst, kLogitTol) << what;
  return worst;
}

float max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

class CudaModelReference : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModelReference, EveryPositionMatchesReference) {
  DS_REQUIRE_GPU();
  const ReferencePrompt ref = load_reference_prompt(GetParam());
  auto m = load(true);
  const size_t V = fixture().config.n_vocab;
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> logits = run_prompt(*m, 1, ref.ids, all_rows(ref.ids.size()));
  const double ms = elapsed_ms(start);
  const float worst = expect_summary_matches(ref.logits, logits, V, ref.name);
  const std::vector<float> last(logits.end() - static_cast<std::ptrdiff_t>(V), logits.end());
  const float worst_last = max_abs(last, ref.last_logits);
  EXPECT_LE(worst_last, kLogitTol) << ref.name << " last-position logits";
  std::printf(
      "[ cuda ] %s: %zu tokens in %.1f ms (incl. all-row LM head); max |logit - ref| %.3g (summary), "
      "%.3g (last row)\n",
      ref.name.c_str(), ref.ids.size(), ms, worst, worst_last);
}

// Prefill in uneven chunks, then the rest token by token: exercises the carried conv/SSM state,
// the KV cache growth and the decode (GEMV, recurrent GDN) paths.
TEST_P(CudaModelReference, ChunkedPrefillMatchesReference) {
  DS_REQUIRE_GPU();
  const ReferencePrompt ref = load_reference_prompt(GetParam());
  auto m = load(true);
  const size_t T = ref.ids.size(), V = fixture().config.n_vocab;
  const size_t decode = std::min<size_t>(T - 1, 8);
  std::vector<int32_t> head(ref.ids.begin(), ref.ids.end() - static_cast<std::ptrdiff_t>(decode));
  std::vector<float> logits = run_prompt(*m, 5, head, all_rows(head.size()), 37);
  for (size_t p = head.size(); p < T; ++p) {
    StepInput in;
    in.seqs.push_back({5, static_cast<uint32_t>(p), {ref.ids[p]}, {0}});
    StepOutput out;
    m->forward(in, &out);
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  }
  expect_summary_matches(ref.logits, logits, V, ref.name + " chunked");
}

INSTANTIATE_TEST_SUITE_P(Prompts, CudaModelReference, ::testing::Values("chat_basic", "rand_200", "rand_1500"));

class CudaModelGreedy : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModelGreedy, GreedyTokensMatchUpToTheFirstTightMargin) {
  DS_REQUIRE_GPU();
  const ReferencePrompt ref = load_reference_prompt(GetParam());
  ASSERT_EQ(ref.greedy_tokens.size(), ref.greedy_margins.size());
  size_t must_match = 0;  // steps before the first reference margin below 2*kLogitTol
  while (must_match < ref.greedy_margins.size() && ref.greedy_margins[must_match] >= kTop1Margin) ++must_match;
  auto m = load(true);
  const size_t V = fixture().config.n_vocab;
  std::vector<float> logits = run_prompt(*m, 7, ref.ids, {static_cast<uint32_t>(ref.ids.size() - 1)});
  std::vector<int32_t> got;
  uint32_t pos = static_cast<uint32_t>(ref.ids.size());
  for (size_t step = 0; step < must_match; ++step) {
    const int32_t next = argmax(logits.data(), V);
    got.push_back(next);
    StepInput in;
    in.seqs.push_back({7, pos++, {next}, {0}});
    StepOutput out;
    m->forward(in, &out);
    logits = out.logits;
  }
  EXPECT_EQ(got, std::vector<int32_t>(ref.greedy_tokens.begin(),
                                      ref.greedy_tokens.begin() + static_cast<std::ptrdiff_t>(must_match)));
  std::printf("[ cuda ] %s: %zu of %zu greedy steps checked\n", ref.name.c_str(), must_match, ref.greedy_tokens.size());
}

TEST_P(CudaModelGreedy, MtpRowsMatchReference) {
  DS_REQUIRE_GPU();
  const ReferencePrompt ref = load_reference_prompt(GetParam());
  ASSERT_TRUE(ref.has_mtp);
  auto m = load(true);
  const size_t T = ref.ids.size(), V = fixture().config.n_vocab;
  std::vector<float> hidden;
  run_prompt(*m, 3, ref.ids, all_rows(T - 1), 0, &hidden);
  std::vector<int32_t> next(ref.ids.begin() + 1, ref.ids.end());
  std::vector<float> mtp;
  m->forward_mtp(3, 0, next, hidden.data(), &mtp);
  expect_summary_matches(ref.mtp_logits, mtp, V, ref.name + " MTP");
  const std::vector<float> last(mtp.end() - static_cast<std::ptrdiff_t>(V), mtp.end());
  EXPECT_LE(max_abs(last, ref.mtp_last_logits), kLogitTol);
}

INSTANTIATE_TEST_SUITE_P(Prompts, CudaModelGreedy, ::testing::Values("chat_basic", "rand_200"));

TEST(CudaModel, LogitsMatchCpuBackend) {
  DS_REQUIRE_GPU();
  const ReferencePrompt ref = load_reference_prompt("rand_200");
  const std::vector<uint32_t> rows = all_rows(ref.ids.size());
  auto gpu = load(true);
  auto cpu_stage = load(false);
  const std::vector<float> g = run_prompt(*gpu, 1, ref.ids, rows);
  auto start = std::chrono::steady_clock::now();
  const std::vector<float> c = run_prompt(*cpu_stage, 1, ref.ids, rows);
  const float worst = max_abs(g, c);
  EXPECT_LE(worst, kCpuTol);
  std::printf("[ cuda ] rand_200 all rows: max |cuda - cpu| = %.3g (cpu forward %.1f ms)\n", worst, elapsed_ms(start));
}

// Issue 9's longest parity case: an 8192-token prompt (the fixture's context) in the scheduler's
// 2048-token steps; the last position's logits against the CPU path. f32 prefill: the f32 budget
// kCpuTol (the same kernels as rand_200, 40x longer: the chunked GDN state and the attention sums
// carry 8192 positions). bf16 prefill (the backend's default: bf16 tensor-core GEMMs and GDN
// tensor cores): the fixture's random weights amplify rounding (~1e4x, see test_cuda_model_bf16.cpp),
// so its bound is relative: the rms of the logit error below 25% of the logits' rms — 2x the level
// measured on the GPU (0.128, max |diff| 0.37; f32: 2.3e-5; docs/history/performance-2026-11.md) —
// while a wrong kernel, a lost chunk's state or a misplaced KV row gives errors of the logits' own
// size (~1). The bf16 kernels' tight bounds are their own parity tests; this one checks they
// compose over 8192 tokens.
TEST(CudaModel, LongPromptLastLogitsMatchCpu) {
  DS_REQUIRE_GPU();
  const Fixture& f = fixture();
  const size_t n = 8192, V = f.config.n_vocab;
  cpu::test::Rng rng(8192);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng.integer(200, static_cast<int>(V) - 1));
  const std::vector<uint32_t> last{static_cast<uint32_t>(n - 1)};
  auto cpu_stage = load(false);
  const std::vector<float> c = run_prompt(*cpu_stage, 1, ids, last, 2048);
  auto f32 = load(true);
  const float worst_f32 = max_abs(run_prompt(*f32, 1, ids, last, 2048), c);
  EXPECT_LE(worst_f32, kCpuTol);
  StageOptions o;
  o.n_threads = 2;
  auto bf16 = load_stage(f.gguf, f.config, {0, f.config.n_layer}, o, make_cuda_backend(0, {}));
  const std::vector<float> b = run_prompt(*bf16, 1, ids, last, 2048);
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < V; ++i) {
    err2 += (double{b[i]} - c[i]) * (double{b[i]} - c[i]);
    ref2 += double{c[i]} * c[i];
  }
  const double rel_rms = std::sqrt(err2 / ref2);
  EXPECT_LE(rel_rms, 0.25);
  std::printf(
      "[ cuda ] 8192-token prompt, last logits vs cpu: f32 max |diff| %.3g; bf16 rms(diff)/rms %.3g, "
      "max |diff| %.3g\n",
      worst_f32, rel_rms, max_abs(b, c));
}

// Two stages on the GPU in one process ([0,3) then [3,n_layer), each with its own backend) equal one.
TEST(CudaModel, TwoStagesEqualOne) {
  DS_REQUIRE_GPU();
  const ReferencePrompt ref = load_reference_prompt("rand_200");
  const uint32_t split = 3;
  auto whole = load(true);
  auto first = load(true, 0, split);
  auto second = load(true, split, 0);
  ASSERT_TRUE(first->is_first() && !first->is_last() && second->is_last());
  const std::vector<uint32_t> rows = all_rows(ref.ids.size());
  const std::vector<float> want = run_prompt(*whole, 1, ref.ids, rows);

  // Same chunking on both halves: prefill of 128 tokens then 72, as the coordinator would send.
  // 128 is a multiple of the chunked GDN's 64-token chunks and of the prefill attention's 64-query
  // tiles, so both steps see the same chunk and tile boundaries as the single 200-token step.
  std::vector<float> got;
  StageHandoff first_handoff(fixture().config.n_embd), second_handoff(fixture().config.n_embd);
  for (size_t begin = 0; begin < ref.ids.size(); begin += 128) {
    const size_t end = std::min(ref.ids.size(), begin + 128);
    StepInput in;
    SeqStep s;
    s.seq_id = 1;
    s.start_pos = static_cast<uint32_t>(begin);
    s.token_ids.assign(ref.ids.begin() + static_cast<std::ptrdiff_t>(begin),
                       ref.ids.begin() + static_cast<std::ptrdiff_t>(end));
    for (size_t r = 0; r < end - begin; ++r) s.logit_rows.push_back(static_cast<uint32_t>(r));
    in.seqs.push_back(s);
    StepOutput mid, out;
    std::vector<float> hidden;
    first_handoff.step(*first, in, {}, &mid, &hidden);
    ASSERT_EQ(hidden.size(), (end - begin) * fixture().config.n_embd);
    HostRows from_first;
    from_first.in = hidden.data();
    second_handoff.step(*second, in, from_first, &out);
    got.insert(got.end(), out.logits.begin(), out.logits.end());
  }
  // `whole` ran one 200-token step, the halves 128 + 72: GEMM tiles differ by token block only,
  // never by the sum order of one output; GDN chunks and attention tiles line up (see above).
  EXPECT_LE(max_abs(got, want), kStageTol);
}

// Two sequences of different lengths and start positions in one step equal separate steps.
TEST(CudaModel, BatchedSequencesEqualSeparateOnes) {
  DS_REQUIRE_GPU();
  const ReferencePrompt a = load_reference_prompt("chat_basic");
  const ReferencePrompt b = load_reference_prompt("rand_200");
  auto m = load(true);
  const std::vector<float> want_a = run_prompt(*m, 1, a.ids, {static_cast<uint32_t>(a.ids.size() - 1)});
  const std::vector<float> want_b = run_prompt(*m, 2, b.ids, {static_cast<uint32_t>(b.ids.size() - 1)});
  StepInput in;
  in.seqs.push_back({11, 0, a.ids, {static_cast<uint32_t>(a.ids.size() - 1)}});
  in.seqs.push_back({12, 0, b.ids, {static_cast<uint32_t>(b.ids.size() - 1)}});
  StepOutput out;
  m->forward(in, &out);
  std::vector<float> want = want_a;
  want.insert(want.end(), want_b.begin(), want_b.end());
  // Batched rows go through the GEMM with other tokens, the separate runs too (both > 8 tokens),
  // so only f32 summation order within identical kernels could differ: none expected.
  EXPECT_LE(max_abs(out.logits, want), kStageTol);
}

TEST(CudaModel, BadDeviceAndBadTokenThrow) {
  DS_REQUIRE_GPU();
  EXPECT_THROW(make_cuda_backend(ds::cuda::device_count()), std::runtime_error);
  auto m = load(true);
  StepInput in;
  in.seqs.push_back({1, 0, {static_cast<int32_t>(fixture().config.n_vocab)}, {0}});
  StepOutput out;
  EXPECT_THROW(m->forward(in, &out), std::exception);
}

}  // namespace
}  // namespace ds::test
