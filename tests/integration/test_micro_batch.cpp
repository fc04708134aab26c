// Micro-batched steps (coordinator/engine/micro_batch.h): the split keeps request order and
// balances tokens; through 3 real workers a decode batch cut into micro-batches gives the
// logits of the whole batch bit for bit, with releases applied first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "coordinator/engine/micro_batch.h"
#include "tests/integration/engine_test_util.h"

namespace ds {
namespace {

SeqRequest request(uint64_t seq, size_t n_tokens, uint32_t start = 0) {
  SeqRequest r;
  r.seq_id = seq;
  r.start_pos = start;
  r.tokens.assign(n_tokens, 7);
  r.logit_rows = {static_cast<uint32_t>(n_tokens - 1)};
  r.random_u = {0.0};
  return r;
}

std::vector<uint64_t> ids_of(const std::vector<SeqRequest>& g) {
  std::vector<uint64_t> ids;
  for (const SeqRequest& r : g) ids.push_back(r.seq_id);
  return ids;
}

TEST(MicroBatch, SplitKeepsOrderAndBalancesTokens) {
  std::vector<SeqRequest> decode;
  for (uint64_t i = 0; i < 8; ++i) decode.push_back(request(i, 1));
  const auto three = split_micro_batches(decode, 3);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(ids_of(three[0]), (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(ids_of(three[1]), (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(ids_of(three[2]), (std::vector<uint64_t>{6, 7}));
  EXPECT_EQ(split_micro_batches(decode, 1).size(), 1u);
  EXPECT_EQ(split_micro_batches(decode, 20).size(), 8u) << "never an empty micro-batch";
  EXPECT_TRUE(split_micro_batches({}, 4).empty());
  // A long prefill chunk gets a micro-batch of its own; the decodes share the other.
  const auto mixed = split_micro_batches({request(1, 100), request(2, 1), request(3, 1)}, 2);
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_EQ(ids_of(mixed[0]), (std::vector<uint64_t>{1}));
  EXPECT_EQ(ids_of(mixed[1]), (std::vector<uint64_t>{2, 3}));
}

TEST(MicroBatch, MergeConcatenatesRowsAndSumsStageTimes) {
  StepOutcome a, b;
  a.rows.resize(2);
  a.rows[0].seq_id = 1;
  a.rows[1].seq_id = 2;
  b.rows.resize(1);
  b.rows[0].seq_id = 3;
  a.timings = {{0, 10, false}, {1, 20, true}};
  b.timings = {{0, 5, false}, {1, 7, false}};
  a.wall_us = 30;
  b.wall_us = 40;
  const StepOutcome m = merge_micro_batches({a, b});
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_EQ(m.rows[2].seq_id, 3u);
  ASSERT_EQ(m.timings.size(), 2u);
  EXPECT_EQ(m.timings[0].compute_us, 15u);
  EXPECT_EQ(m.timings[1].compute_us, 27u);
  EXPECT_FALSE(m.timings[1].input_from_shm);
  EXPECT_EQ(m.wall_us, 40u);
  EXPECT_EQ(m.n_plans, 2u);
}

// Prefills 6 sequences, then decodes them for a few steps in one batch; returns every full
// logits row in order. micro_batches > 1 cuts each batched step into micro-batches in flight.
std::vector<std::vector<float>> batched_logits(uint32_t micro_batches) {
  EngineOptions options = test::engine_options(3);
  options.micro_batches = micro_batches;
  PipelineEngine engine(options);
  engine.start();
  std::vector<std::vector<float>> rows;
  const std::vector<int32_t> prompt = test::random_prompt(40, 151936, 21);
  std::vector<SeqRequest> step;
  for (uint64_t s = 0; s < 6; ++s) {
    SeqRequest r;
    r.seq_id = 100 + s;
    r.tokens.assign(prompt.begin(), prompt.begin() + static_cast<long>(5 + 6 * s));  // lengths 5..35
    r.logit_rows = {static_cast<uint32_t>(r.tokens.size() - 1)};
    r.random_u = {0.0};
    r.return_full_logits = true;
    step.push_back(r);
  }
  std::vector<uint64_t> released;
  for (int i = 0; i < 4; ++i) {
    const StepOutcome out = engine.step(step, released);
    EXPECT_EQ(out.rows.size(), step.size());
    EXPECT_EQ(out.n_plans, std::min<size_t>(micro_batches, step.size()));
    for (size_t k = 0; k < out.rows.size(); ++k) {
      EXPECT_EQ(out.rows[k].seq_id, step[k].seq_id) << "rows in request order";
      rows.push_back(out.rows[k].logits);
    }
    // Next: one decode token per sequence; the last sequence is released after step 2.
    std::vector<SeqRequest> next;
    released.clear();
    for (size_t k = 0; k < step.size(); ++k) {
      if (i == 1 && k + 1 == step.size()) {
        released.push_back(step[k].seq_id);
        continue;
      }
      SeqRequest d = step[k];
      d.start_pos = step[k].start_pos + static_cast<uint32_t>(step[k].tokens.size());
      d.tokens = {out.rows[k].token};
      d.logit_rows = {0};
      next.push_back(d);
    }
    step = next;
  }
  return rows;
}

TEST(MicroBatch, MicroBatchedStepsEqualWholeBatchBitForBit) {
  const auto whole = batched_logits(1);
  const auto micro = batched_logits(3);
  ASSERT_EQ(whole.size(), micro.size());
  ASSERT_EQ(whole.size(), 6u + 6u + 5u + 5u);
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_EQ(whole[i].size(), micro[i].size());
    EXPECT_EQ(std::memcmp(whole[i].data(), micro[i].data(), whole[i].size() * sizeof(float)), 0) << "row " << i;
  }
}

}  // namespace
}  // namespace ds
