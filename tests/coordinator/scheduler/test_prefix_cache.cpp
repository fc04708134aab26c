// Hybrid prefix cache: KV blocks by content hash + GDN snapshots at block boundaries.
#include <gtest/gtest.h>

#include "tests/coordinator/scheduler/fake_worker.h"

namespace ds::test {
namespace {

SchedulerConfig cache_config() {
  SchedulerConfig c;
  c.block_size = 4;
  c.num_blocks = 64;
  c.max_batch_tokens = 64;
  c.max_seqs = 4;
  c.max_context = 256;
  c.num_snapshots = 8;
  c.eos_token_ids = {kEos};
  return c;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs one request alone and returns its first plan row.
ScheduledSeq run_alone(Harness& h, const std::string& id, const std::vector<int32_t>& prompt, uint32_t max_tokens) {
  h.add(id, prompt, max_tokens, true);
  EXPECT_EQ(h.step(), "");
  ScheduledSeq first = h.last_plan.seqs.at(0);
  EXPECT_EQ(h.run_to_completion(), "");
  return first;
}

// The same request on a cold scheduler without a cache: the reference output.
std::vector<int32_t> cold_output(const std::vector<int32_t>& prompt, uint32_t max_tokens) {
  SchedulerConfig c = cache_config();
  c.num_snapshots = 0;
  Harness h(c);
  h.add("x", prompt, max_tokens, true);
  EXPECT_EQ(h.run_to_completion(), "");
  return h.outputs["x"];
}

TEST(PrefixCache, PromptIsSplitAtItsSnapshotPoint) {
  Harness h(cache_config());
  h.add("a", iota_tokens(22), 2, true);
  ASSERT_EQ(h.step(), "");
  const ScheduledSeq& row = h.last_plan.seqs.at(0);
  EXPECT_EQ(row.token_ids.size(), 20u);  // last block boundary before the end
  EXPECT_TRUE(row.save_snapshot.has_value());
  EXPECT_FALSE(row.needs_logits);
  ASSERT_EQ(h.step(), "");
  EXPECT_EQ(h.last_plan.seqs.at(0).token_ids.size(), 2u);
  EXPECT_TRUE(h.last_plan.seqs.at(0).needs_logits);
}

TEST(PrefixCache, SecondRequestWithSamePrefixReusesBlocksAndSnapshot) {
  Harness h(cache_config());
  std::vector<int32_t> prompt = iota_tokens(22);
  ScheduledSeq a = run_alone(h, "a", prompt, 2);
  std::vector<int32_t> longer = concat(prompt, {100, 101, 102});
  ScheduledSeq b = run_alone(h, "b", longer, 3);
  EXPECT_TRUE(b.is_new);
  EXPECT_EQ(b.start_pos, 20u);
  EXPECT_EQ(b.load_snapshot, a.save_snapshot);
  ASSERT_GE(b.block_ids.size(), 5u);
  EXPECT_EQ(std::vector<uint32_t>(b.block_ids.begin(), b.block_ids.begin() + 5), a.block_ids);
  EXPECT_EQ(h.finished["b"].cached_tokens, 20u);
  EXPECT_EQ(h.outputs["b"], cold_output(longer, 3));
  EXPECT_EQ(h.sched.stats().prefix_hit_tokens, 20u);
}

TEST(PrefixCache, IdenticalPromptHitsTheLastBoundaryBeforeItsEnd) {
  Harness h(cache_config());
  std::vector<int32_t> prompt = iota_tokens(16);
  run_alone(h, "a", prompt, 3);
  ScheduledSeq b = run_alone(h, "b", prompt, 3);
  EXPECT_EQ(b.start_pos, 12u);
  EXPECT_EQ(b.token_ids.size(), 4u);
  EXPECT_EQ(h.outputs["a"], h.outputs["b"]);
}

TEST(PrefixCache, NoHitBelowOneBlockOrWithoutSnapshots) {
  Harness h(cache_config());
  run_alone(h, "a", iota_tokens(3), 2);
  // b shares a's 3 prompt tokens only (generated tokens are < 64).
  EXPECT_EQ(run_alone(h, "b", concat(iota_tokens(3), {100, 101}), 2).start_pos, 0u);
  SchedulerConfig c = cache_config();
  c.num_snapshots = 0;  // KV alone is useless to the GDN layers
  Harness off(c);
  run_alone(off, "a", iota_tokens(22), 2);
  EXPECT_EQ(run_alone(off, "b", iota_tokens(22), 2).start_pos, 0u);
}

// A model without recurrent layers (qwen3 rerankers): a later prompt hits every cached block it
// shares, wherever it diverges, with no snapshot saved or loaded, even with num_snapshots 0.
TEST(PrefixCache, StatelessModelHitsAnySharedBlockWithoutSnapshots) {
  for (const uint32_t snapshots : {8u, 0u}) {
    SchedulerConfig c = cache_config();
    c.stateless = true;
    c.num_snapshots = snapshots;
    Harness h(c);
    const std::vector<int32_t> shared = iota_tokens(13);  // 3 full blocks, then one token
    const ScheduledSeq a = run_alone(h, "a", concat(shared, {100, 101, 102, 103, 104}), 1);
    EXPECT_EQ(a.token_ids.size(), 18u);  // no snapshot point: the whole prompt in one row
    EXPECT_FALSE(a.save_snapshot.has_value());
    const std::vector<int32_t> b_prompt = concat(shared, {200, 201, 202});
    const ScheduledSeq b = run_alone(h, "b", b_prompt, 1);
    EXPECT_TRUE(b.is_new);
    EXPECT_EQ(b.start_pos, 12u) << snapshots;
    EXPECT_FALSE(b.load_snapshot.has_value());
    EXPECT_EQ(std::vector<uint32_t>(b.block_ids.begin(), b.block_ids.begin() + 3),
              std::vector<uint32_t>(a.block_ids.begin(), a.block_ids.begin() + 3));
    EXPECT_EQ(h.finished["b"].cached_tokens, 12u);
  }
}

TEST(PrefixCache, MultiTurnConversationReusesThePreviousTurn) {
  Harness h(cache_config());
  std::vector<int32_t> turn1 = iota_tokens(21);
  run_alone(h, "t1", turn1, 10);
  // Turn 2 = turn 1 + its answer + a new user message. Turn 1 computed 30 tokens; its last
  // generation snapshot is at 28, the last block boundary it reached.
  std::vector<int32_t> turn2 = concat(concat(turn1, h.outputs["t1"]), {200, 201, 202, 203, 204});
  ScheduledSeq t2 = run_alone(h, "t2", turn2, 10);
  EXPECT_EQ(t2.start_pos, 28u);
  EXPECT_TRUE(t2.load_snapshot.has_value());
  EXPECT_EQ(h.outputs["t2"], cold_output(turn2, 10));
  std::vector<int32_t> turn3 = concat(concat(turn2, h.outputs["t2"]), {300, 301});
  ScheduledSeq t3 = run_alone(h, "t3", turn3, 4);
  EXPECT_EQ(t3.start_pos, 44u);  // turn 2 computed 45 tokens
  EXPECT_EQ(h.outputs["t3"], cold_output(turn3, 4));
}

TEST(PrefixCache, ReRenderedHistoryFallsBackToThePromptSnapshot) {
  Harness h(cache_config());
  std::vector<int32_t> turn1 = iota_tokens(21);
  run_alone(h, "t1", turn1, 10);
  // The template dropped the answer (e.g. reasoning stripped): only turn 1's prompt matches.
  std::vector<int32_t> turn2 = concat(turn1, {500, 501, 502, 503, 504, 505});
  EXPECT_EQ(run_alone(h, "t2", turn2, 3).start_pos, 20u);
}

TEST(PrefixCache, SnapshotsAreEvictedLeastRecentlyUsed) {
  SchedulerConfig c = cache_config();
  c.num_snapshots = 2;
  Harness h(c);
  auto x = iota_tokens(10, 1000), y = iota_tokens(10, 2000), z = iota_tokens(10, 3000);
  run_alone(h, "x", x, 1);
  run_alone(h, "y", y, 1);
  EXPECT_EQ(run_alone(h, "x2", concat(x, {7}), 1).start_pos, 8u);  // touches x: y is LRU
  run_alone(h, "z", z, 1);                                         // evicts y
  EXPECT_EQ(h.sched.stats().snapshot_evictions, 1u);
  EXPECT_EQ(run_alone(h, "y2", concat(y, {7}), 1).start_pos, 0u) << "KV cached, state not";
  EXPECT_EQ(run_alone(h, "z2", concat(z, {7}), 1).start_pos, 8u);
}

TEST(PrefixCache, KvBlocksAreEvictedUnderMemoryPressure) {
  SchedulerConfig c = cache_config();
  c.num_blocks = 8;
  Harness h(c);
  auto x = iota_tokens(10, 1000);
  run_alone(h, "x", x, 1);
  EXPECT_EQ(run_alone(h, "x2", concat(x, {7}), 1).start_pos, 8u);
  run_alone(h, "big", iota_tokens(29, 5000), 1);  // needs every block
  EXPECT_GT(h.sched.stats().block_evictions, 0u);
  EXPECT_EQ(run_alone(h, "x3", concat(x, {7}), 1).start_pos, 0u);
  EXPECT_EQ(h.outputs["x3"], h.outputs["x2"]);
}

TEST(PrefixCache, SharedBlocksAreReferencedByEveryUser) {
  Harness h(cache_config());
  std::vector<int32_t> prompt = iota_tokens(22);
  ScheduledSeq a = run_alone(h, "a", prompt, 1);
  h.add("b", concat(prompt, {1, 2}), 20, true);
  h.add("c", concat(prompt, {3, 4}), 20, true);
  ASSERT_EQ(h.step(), "");  // both hit a's blocks at once; invariants check ref counts
  ASSERT_EQ(h.last_plan.seqs.size(), 2u);
  EXPECT_EQ(h.last_plan.seqs[0].block_ids[0], a.block_ids[0]);
  EXPECT_EQ(h.last_plan.seqs[1].block_ids[0], a.block_ids[0]);
  ASSERT_EQ(h.run_to_completion(), "");
  EXPECT_EQ(h.sched.stats().free_blocks, 64u);
}

}  // namespace
}  // namespace ds::test
