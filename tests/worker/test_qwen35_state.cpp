// Chaining calls through per-sequence state: prefill in one call, in chunks of 1 / 7 / 64,
// and prefill + decode must give the same logits, and a batch mixing several sequences in
// one step must equal running them alone. On the CPU backend these are bit-exact (tolerance
// 0): every kernel's arithmetic per token is independent of batching (fixed-order dot
// products, token-by-token GDN recurrence), which is what makes crash replay reproducible.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "common/error.h"
#include "tests/testutil/reference.h"
#include "tests/worker/model_harness.h"
#include "worker/daemon/stage_handoff.h"

namespace ds::test {
namespace {

constexpr float kChainTol = 0.0f;

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

TEST(Qwen35State, ChunkedPrefillMatchesOneCall) {
  const ReferencePrompt ref = load_reference_prompt("rand_200");
  LoadedModel m = load_fixture();
  const std::vector<uint32_t> rows = {0, 63, 64, 65, 127, 199};
  const std::vector<float> whole = run_prompt(*m.stage, 1, ref.ids, rows);
  for (size_t chunk : {1, 7, 64}) {
    const std::vector<float> chunked = run_prompt(*m.stage, 2, ref.ids, rows, chunk);
    EXPECT_LE(max_abs_diff(whole, chunked), kChainTol) << "chunk " << chunk;
  }
}

TEST(Qwen35State, MixedBatchEqualsSeparateRuns) {
  const ReferencePrompt ref = load_reference_prompt("chat_basic");
  LoadedModel m = load_fixture();
  const size_t V = m.config.n_vocab;
  // Alone: A = chat_basic, B = its first 5 tokens, then 3 decode tokens for B.
  std::vector<int32_t> a = ref.ids, b(ref.ids.begin(), ref.ids.begin() + 5);
  const std::vector<int32_t> b_tail = {11, 12, 13};
  std::vector<float> a_alone = run_prompt(*m.stage, 10, a, {static_cast<uint32_t>(a.size() - 1)});
  std::vector<int32_t> b_full = b;
  b_full.insert(b_full.end(), b_tail.begin(), b_tail.end());
  std::vector<float> b_alone = run_prompt(*m.stage, 11, b_full, {static_cast<uint32_t>(b_full.size() - 1)});

  // Together: step 1 prefills B; step 2 mixes A's whole prefill with B's 3-token continuation.
  run_prompt(*m.stage, 21, b, {});
  StepInput in;
  in.seqs.push_back({20, 0, a, {static_cast<uint32_t>(a.size() - 1)}});
  in.seqs.push_back({21, 5, b_tail, {2}});
  StepOutput out;
  m.stage->forward(in, &out);
  ASSERT_EQ(out.logits.size(), 2 * V);
  EXPECT_LE(max_abs_diff(std::vector<float>(out.logits.begin(), out.logits.begin() + static_cast<std::ptrdiff_t>(V)),
                         a_alone),
            kChainTol);
  EXPECT_LE(
      max_abs_diff(std::vector<float>(out.logits.begin() + static_cast<std::ptrdiff_t>(V), out.logits.end()), b_alone),
      kChainTol);
}

TEST(Qwen35State, BadStepsAreRejectedWithoutCorruptingState) {
  LoadedModel m = load_fixture();
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  const std::vector<float> before = run_prompt(*m.stage, 5, ids, {3});
  StepOutput out;
  StepInput gap;
  gap.seqs.push_back({5, 9, {7}, {0}});  // skips positions 4..8
  EXPECT_THROW(m.stage->forward(gap, &out), ConfigError);
  StepInput bad_id;
  bad_id.seqs.push_back({5, 4, {static_cast<int32_t>(m.config.n_vocab)}, {0}});
  EXPECT_THROW(m.stage->forward(bad_id, &out), ConfigError);
  StepInput bad_row;
  bad_row.seqs.push_back({5, 4, {7}, {1}});
  EXPECT_THROW(m.stage->forward(bad_row, &out), ConfigError);
  // The sequence still continues at position 4 exactly as a fresh run would.
  std::vector<int32_t> longer = ids;
  longer.push_back(7);
  const std::vector<float> fresh = run_prompt(*m.stage, 6, longer, {4});
  StepInput next;
  next.seqs.push_back({5, 4, {7}, {0}});
  m.stage->forward(next, &out);
  // 4 + 1 tokens vs 5 in one call.
  EXPECT_LE(max_abs_diff(out.logits, fresh), kChainTol);
  EXPECT_EQ(before.size(), m.config.n_vocab);
}

// The fixture split after layer 3, the chat_basic prompt as one step, and the whole model's logits
// of its last row (what the two stages must give).
struct TwoStages {
  LoadedModel first = load_fixture(false, {0, 3});
  LoadedModel second = load_fixture(false, {3, first.config.n_layer});
  StepInput in;
  std::vector<float> want;
  TwoStages() {
    const ReferencePrompt ref = load_reference_prompt("chat_basic");
    const std::vector<uint32_t> last{static_cast<uint32_t>(ref.ids.size() - 1)};
    want = run_prompt(*load_fixture().stage, 1, ref.ids, last);
    in.seqs.push_back({1, 0, ref.ids, last});
  }
};

TEST(Qwen35State, TwoStagesEqualOneStage) {
  TwoStages two;
  auto& [first, second, in, want] = two;
  StepOutput mid, out;
  std::vector<float> hidden;
  StageHandoff(first.config.n_embd).step(*first.stage, in, {}, &mid, &hidden);
  HostRows rows;
  rows.in = hidden.data();
  StageHandoff(first.config.n_embd).step(*second.stage, in, rows, &out);
  EXPECT_EQ(out.logits, want);  // same ops in the same order: bit-identical
}

// The signalled hand-off (--early-handoff): stage 0 writes its rows into the caller's buffer and
// sets the ready word; stage 1 given a ready word reads its input only once the word is set. The
// input buffer holds NaN until the word goes up 50 ms after stage 1 started, so a stage that read
// early would give NaN logits, not the reference's bits. Both ways to wait: the backend's own
// (queued on a device; the cpu backend waits on its host) and the host's (--early-handoff host).
class SignalledHandOff : public ::testing::TestWithParam<bool> {};

TEST_P(SignalledHandOff, WaitsForTheRows) {
  TwoStages two;
  auto& [first, second, in, want] = two;
  const size_t n_floats = in.seqs[0].token_ids.size() * first.config.n_embd;
  std::vector<float> slot(n_floats, 0.0f);
  uint32_t out_word = 0;
  HostRows to_slot;
  to_slot.out = slot.data();
  to_slot.out_ready = HostSignal{&out_word, 0x80000005u};
  StepOutput mid;
  std::vector<float> unused;
  StageHandoff first_handoff(first.config.n_embd);
  EXPECT_TRUE(first_handoff.step(*first.stage, in, to_slot, &mid, &unused)) << "a signalled copy is deferred";
  EXPECT_TRUE(unused.empty()) << "the rows went to the slot";
  EXPECT_NE(slot, std::vector<float>(n_floats, 0.0f));
  EXPECT_EQ(out_word, 0x80000005u) << "the cpu backend's rows are in place when forward returns";

  std::vector<float> late(n_floats, std::nanf(""));
  uint32_t in_word = 0;
  HostRows landing;
  landing.in = late.data();
  landing.in_ready = HostSignal{&in_word, 0x80000009u};
  landing.in_ready_on_host = GetParam();
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::copy(slot.begin(), slot.end(), late.begin());
    HostSignal{&in_word, 0x80000009u}.set();
  });
  StepOutput out;
  StageHandoff(first.config.n_embd).step(*second.stage, in, landing, &out);
  producer.join();
  EXPECT_EQ(out.logits, want);  // bit-identical to one stage: the rows were read after they landed
}

INSTANTIATE_TEST_SUITE_P(Qwen35State, SignalledHandOff, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& i) {
  return i.param ? "HostWaits" : "BackendWaits";
});

}  // namespace
}  // namespace ds::test
