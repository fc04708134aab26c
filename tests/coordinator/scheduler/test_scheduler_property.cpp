// Property test: random arrivals, prompt sharing, multi-turn follow-ups, lengths, stops and
// aborts over many steps and configurations. After every schedule and update the memory
// invariants must hold (no block both free and used, ref counts equal block-table uses,
// one slot per live sequence); the fake worker checks every KV read and state; every
// request that was not aborted must produce exactly the fake model's output; at the end
// everything is free again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "tests/coordinator/scheduler/fake_worker.h"

namespace ds::test {
namespace {

constexpr uint32_t kVocab = 64;

// What the fake model generates for a prompt on its own: the ground truth.
std::vector<int32_t> expected_output(std::vector<int32_t> history, uint32_t max_tokens, uint32_t max_context) {
  std::vector<int32_t> out;
  while (true) {
    int32_t t = fake_model_token(history, kVocab);
    history.push_back(t);
    out.push_back(t);
    if (t == kEos || out.size() >= max_tokens || history.size() >= max_context) return out;
  }
}

struct Workload {
  std::mt19937 rng;
  std::vector<std::vector<int32_t>> system_prompts;
  std::vector<std::vector<int32_t>> conversations;  // finished prompt + output, for follow-ups

  uint32_t uniform(uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); }
  std::vector<int32_t> tokens(uint32_t n) {
    std::vector<int32_t> v(n);
    for (auto& t : v) t = static_cast<int32_t>(uniform(1, 1000));
    return v;
  }
  std::vector<int32_t> prompt() {
    std::vector<int32_t> p;
    uint32_t kind = uniform(0, 2);
    if (kind == 1) p = system_prompts[uniform(0, 2)];
    if (kind == 2 && !conversations.empty()) p = conversations[uniform(0, conversations.size() - 1)];
    if (p.size() > 40) p.resize(uniform(1, 40));
    auto tail = tokens(uniform(1, 10));
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  }
};

SchedulerConfig random_config(Workload& w) {
  SchedulerConfig c;
  c.block_size = std::vector<uint32_t>{1, 2, 4, 16}[w.uniform(0, 3)];
  uint32_t min_blocks = (72 + c.block_size - 1) / c.block_size;  // one longest request
  c.num_blocks = min_blocks + w.uniform(0, 120 / c.block_size);
  c.max_batch_tokens = w.uniform(4, 64);
  c.max_seqs = w.uniform(1, 6);
  c.max_context = w.uniform(56, 128);
  c.watermark_blocks = w.uniform(0, 2);
  c.num_snapshots = std::vector<uint32_t>{0, 2, 16}[w.uniform(0, 2)];
  c.snapshot_decode = w.uniform(0, 1) == 1;
  c.eos_token_ids = {kEos};
  return c;
}

struct Totals : SchedulerStats {
  uint32_t most_in_flight = 0;    // steps in flight at once, at most, over the runs
  uint32_t runs_overlapping = 0;  // runs that had two or more steps in flight at some point
};

// spec_k > 0: MTP speculation on (the fake worker verifies and drafts, see fake_worker.h).
// in_flight > 1: that many steps in flight, and 1..in_flight decode groups.
// stateless: a model without recurrent layers (prefix hits at any cached block; the fake worker
// rebuilds a new row's history from the blocks it shares).
void run_one(uint32_t seed, Totals& total, uint32_t spec_k = 0, uint32_t in_flight = 1, bool stateless = false) {
  Workload w{std::mt19937(seed), {}, {}};
  for (int i = 0; i < 3; ++i) w.system_prompts.push_back(w.tokens(w.uniform(8, 30)));
  SchedulerConfig config = random_config(w);
  config.stateless = stateless;
  config.spec_k = spec_k;
  config.max_steps_in_flight = in_flight;
  config.decode_groups = in_flight > 1 ? w.uniform(1, in_flight) : 1;
  // One longest request must still fit alone, drafts and draft rows included.
  config.num_blocks += (2 * spec_k + config.block_size - 1) / config.block_size;
  Harness h(config, kVocab);
  std::map<std::string, std::vector<int32_t>> prompts;
  std::map<std::string, std::vector<int32_t>> expected;
  std::set<std::string> aborted;
  std::set<std::string> recorded;
  int next_id = 0;
  for (int step = 0; step < 400; ++step) {
    if (next_id < 60 && w.uniform(0, 2) == 0) {
      std::string id = "r" + std::to_string(next_id++);
      prompts[id] = w.prompt();
      if (prompts[id].size() >= config.max_context) prompts[id].resize(config.max_context - 1);
      uint32_t max_tokens = w.uniform(1, 20);
      expected[id] = expected_output(prompts[id], max_tokens, config.max_context);
      h.add(id, prompts[id], max_tokens);
    }
    if (next_id > 0 && w.uniform(0, 30) == 0) {
      std::string id = "r" + std::to_string(w.uniform(0, next_id - 1));
      if (h.sched.abort(id)) aborted.insert(id);
    }
    ASSERT_EQ(h.step(), "") << "seed " << seed << " step " << step;
    for (const auto& [id, f] : h.finished) {
      if (!recorded.insert(id).second) continue;
      auto c = prompts[id];
      c.insert(c.end(), h.outputs[id].begin(), h.outputs[id].end());
      if (w.conversations.size() < 50) w.conversations.push_back(c);
    }
  }
  ASSERT_EQ(h.run_to_completion(), "") << "seed " << seed;
  ASSERT_EQ(h.step(), "");  // flush the last releases to the worker
  for (const auto& [id, out] : expected) {
    if (aborted.count(id)) continue;
    EXPECT_EQ(h.outputs[id], out) << "seed " << seed << " request " << id;
  }
  SchedulerStats st = h.sched.stats();
  EXPECT_EQ(st.free_blocks, config.num_blocks) << "seed " << seed;
  EXPECT_EQ(st.running + st.waiting, 0u);
  EXPECT_EQ(h.sched.check_invariants(), "");
  total.preemptions += st.preemptions;
  total.prefix_hit_tokens += st.prefix_hit_tokens;
  total.prefix_queried_tokens += st.prefix_queried_tokens;
  total.block_evictions += st.block_evictions;
  total.snapshot_evictions += st.snapshot_evictions;
  total.spec.drafted += st.spec.drafted;
  total.spec.accepted += st.spec.accepted;
  total.spec.steps += st.spec.steps;
  total.most_in_flight = std::max(total.most_in_flight, h.most_in_flight);
  total.runs_overlapping += h.most_in_flight > 1;
}

TEST(SchedulerProperty, RandomTrafficKeepsMemoryConsistentAndOutputsExact) {
  Totals total;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    run_one(seed, total);
    if (HasFatalFailure()) return;
  }
  // The random traffic must actually reach the interesting paths.
  EXPECT_GT(total.preemptions, 20u);
  EXPECT_GT(total.prefix_hit_tokens, total.prefix_queried_tokens / 50);
  EXPECT_GT(total.block_evictions, 0u);
  EXPECT_GT(total.snapshot_evictions, 0u);
  std::printf(
      "preemptions %lu, prefix hits %lu of %lu prompt tokens, evictions %lu blocks %lu "
      "snapshots\n",
      static_cast<unsigned long>(total.preemptions), static_cast<unsigned long>(total.prefix_hit_tokens),
      static_cast<unsigned long>(total.prefix_queried_tokens), static_cast<unsigned long>(total.block_evictions),
      static_cast<unsigned long>(total.snapshot_evictions));
}

// The same traffic for a model without recurrent state: every shared cached block is a hit, no
// snapshot is kept, and the outputs (a function of each sequence's whole history, which the fake
// worker reads back from the shared blocks) are still exactly the fake model's.
TEST(SchedulerProperty, StatelessModelTrafficKeepsOutputsExact) {
  Totals total;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    run_one(seed, total, 0, 1, true);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(total.prefix_hit_tokens, total.prefix_queried_tokens / 20);
  EXPECT_EQ(total.snapshot_evictions, 0u);
  EXPECT_GT(total.preemptions, 10u);
}

// The same traffic with speculation: drafts in rows, rollback after rejections, block
// lookahead for the draft rows, no snapshot of a state holding rejected positions. Outputs
// must still be exactly the fake model's (greedy speculation is lossless), with the fake
// worker checking every KV read, state and rewind.
TEST(SchedulerProperty, SpeculativeDecodingKeepsOutputsExact) {
  Totals total;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    run_one(seed, total, 1 + seed % kMaxSpecK);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(total.preemptions, 10u);
  EXPECT_GT(total.spec.accepted, total.spec.drafted / 4);  // drafts are right 3 times in 4
  EXPECT_LT(total.spec.accepted, total.spec.drafted);
  EXPECT_GT(total.prefix_hit_tokens, 0u);
  std::printf("spec: %lu drafted, %lu accepted in %lu verify rows; %lu preemptions\n",
              static_cast<unsigned long>(total.spec.drafted), static_cast<unsigned long>(total.spec.accepted),
              static_cast<unsigned long>(total.spec.steps), static_cast<unsigned long>(total.preemptions));
}

// Several steps in flight (the serving engine with --decode-groups / --pipeline-depth): busy
// sequences sit out later plans, results come back oldest first (prefill-only plans applied
// at once), and the outputs must still be exactly the fake model's, with and without drafts.
TEST(SchedulerProperty, StepsInFlightKeepOutputsExact) {
  Totals total;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    run_one(seed, total, seed % 3 == 0 ? 1 + seed % kMaxSpecK : 0, 2 + seed % 2);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(total.preemptions, 10u);
  EXPECT_GT(total.prefix_hit_tokens, 0u);
  EXPECT_GT(total.spec.accepted, 0u);
  // Runs with one live sequence at most (max_seqs 1) never overlap steps; most others must.
  EXPECT_EQ(total.most_in_flight, 3u);
  EXPECT_GT(total.runs_overlapping, 25u);
  std::printf("%u of 40 runs had steps in flight together; %lu preemptions\n", total.runs_overlapping,
              static_cast<unsigned long>(total.preemptions));
}

}  // namespace
}  // namespace ds::test
