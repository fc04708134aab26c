// Continuous batching without the prefix cache: budget filling, limits, order,
// preemption, block-table deltas, finish conditions, aborts.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/coordinator/scheduler/fake_worker.h"

namespace ds::test {
namespace {

SchedulerConfig small_config() {
  SchedulerConfig c;
  c.block_size = 4;
  c.num_blocks = 64;
  c.max_batch_tokens = 32;
  c.max_seqs = 4;
  c.max_context = 256;
  c.eos_token_ids = {kEos};
  return c;
}

const ScheduledSeq* row_of(const StepPlan& plan, const std::string& id) {
  for (const ScheduledSeq& s : plan.seqs) {
    if (s.request_id == id) return &s;
  }
  return nullptr;
}

TEST(Batching, DecodeFirstThenChunkedPrefillUnderTheBudget) {
  Harness h(small_config());
  h.add("a", iota_tokens(10), 5, true);
  ASSERT_EQ(h.step(), "");
  ASSERT_EQ(h.last_plan.seqs.size(), 1u);
  EXPECT_EQ(h.last_plan.seqs[0].token_ids.size(), 10u);
  EXPECT_TRUE(h.last_plan.seqs[0].needs_logits);

  h.add("b", iota_tokens(50), 5, true);
  ASSERT_EQ(h.step(), "");
  const auto& p = h.last_plan;
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].request_id, "a");  // decode first
  EXPECT_EQ(p.seqs[0].start_pos, 10u);
  EXPECT_EQ(p.seqs[0].token_ids.size(), 1u);
  EXPECT_EQ(p.seqs[1].request_id, "b");  // 31 tokens left, cut to a block boundary
  EXPECT_EQ(p.seqs[1].token_ids.size(), 28u);
  EXPECT_FALSE(p.seqs[1].needs_logits);
  EXPECT_EQ(p.num_tokens(), 29u);
  EXPECT_EQ(p.logits_rows(), std::vector<uint32_t>{0});

  ASSERT_EQ(h.step(), "");
  ASSERT_EQ(h.last_plan.seqs.size(), 2u);
  EXPECT_EQ(h.last_plan.seqs[1].start_pos, 28u);
  EXPECT_EQ(h.last_plan.seqs[1].token_ids.size(), 22u);  // the rest of the prompt
  EXPECT_EQ(h.last_plan.logits_rows(), (std::vector<uint32_t>{0, 22}));
}

TEST(Batching, DecodeRowsPrecedeOlderPrefillChunks) {
  SchedulerConfig c = small_config();
  c.max_batch_tokens = 33;
  Harness h(c);
  h.add("old", iota_tokens(100), 2, true);
  h.add("young", iota_tokens(2), 5, true);
  ASSERT_EQ(h.step(), "");  // old: 32 tokens, young: the 1 token left of the budget
  ASSERT_EQ(h.last_plan.seqs.size(), 2u);
  EXPECT_EQ(h.last_plan.seqs[1].token_ids.size(), 1u);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(h.step(), "");
    ASSERT_EQ(h.last_plan.seqs.size(), 2u);
    EXPECT_EQ(h.last_plan.seqs[0].request_id, "young");
    EXPECT_EQ(h.last_plan.seqs[0].token_ids.size(), 1u);
    EXPECT_EQ(h.last_plan.seqs[1].request_id, "old");
    EXPECT_EQ(h.last_plan.seqs[1].token_ids.size(), 32u);
  }
}

TEST(Batching, MaxSeqsLimitsLiveSequencesAndFreedSlotsAreReused) {
  SchedulerConfig c = small_config();
  c.max_seqs = 2;
  Harness h(c);
  h.add("a", iota_tokens(4), 3, true);
  h.add("b", iota_tokens(4), 3, true);
  h.add("c", iota_tokens(4), 3, true);
  ASSERT_EQ(h.step(), "");
  EXPECT_EQ(h.last_plan.seqs.size(), 2u);
  EXPECT_EQ(h.sched.stats().waiting, 1u);
  ASSERT_EQ(h.step(), "");
  ASSERT_EQ(h.step(), "");  // a and b finish here
  EXPECT_EQ(h.finished.size(), 2u);
  ASSERT_EQ(h.step(), "");
  EXPECT_EQ(h.last_plan.released.size(), 2u);
  ASSERT_EQ(h.last_plan.seqs.size(), 1u);
  EXPECT_EQ(h.last_plan.seqs[0].request_id, "c");
  EXPECT_EQ(h.last_plan.seqs[0].state_slot, 0u);
  EXPECT_EQ(h.run_to_completion(), "");
}

TEST(Batching, FirstComeFirstServed) {
  SchedulerConfig c = small_config();
  c.max_seqs = 1;
  Harness h(c);
  std::vector<std::string> admitted;
  for (const char* id : {"a", "b", "c"}) h.add(id, iota_tokens(6), 2, true);
  for (int i = 0; i < 20 && h.sched.has_unfinished(); ++i) {
    ASSERT_EQ(h.step(), "");
    for (const ScheduledSeq& s : h.last_plan.seqs) {
      if (s.is_new) admitted.push_back(s.request_id);
    }
  }
  EXPECT_EQ(admitted, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(Batching, PreemptsYoungestAndReprefillsPromptPlusGenerated) {
  SchedulerConfig c = small_config();
  c.num_blocks = 8;  // 32 token slots for two sequences growing to 20 tokens each
  c.max_batch_tokens = 64;
  Harness h(c);
  h.add("a", iota_tokens(8), 12, true);
  h.add("b", iota_tokens(8, 100), 12, true);
  size_t expect_reprefill = 0;
  size_t reprefilled = 0;
  bool reprefill_done = false;
  for (int i = 0; i < 200 && h.sched.has_unfinished(); ++i) {
    ASSERT_EQ(h.step(), "");
    const StepPlan& p = h.last_plan;
    bool b_preempted =
        std::any_of(p.released.begin(), p.released.end(), [](const ReleasedSeq& r) { return r.request_id == "b"; });
    if (b_preempted) {  // possibly again, while re-prefilling: start over
      EXPECT_EQ(row_of(p, "b"), nullptr);
      EXPECT_NE(row_of(p, "a"), nullptr) << "the older sequence keeps running";
      expect_reprefill = 8 + h.outputs["b"].size();
      reprefilled = 0;
      reprefill_done = false;
    }
    const ScheduledSeq* b = row_of(p, "b");
    if (expect_reprefill != 0 && b != nullptr && !reprefill_done) {
      if (reprefilled == 0) {
        EXPECT_TRUE(b->is_new);
        EXPECT_EQ(b->start_pos, 0u);
      }
      EXPECT_EQ(b->start_pos, reprefilled);
      reprefilled += b->token_ids.size();
      if (b->needs_logits) reprefill_done = true;
    }
  }
  EXPECT_GT(expect_reprefill, 8u);
  EXPECT_EQ(reprefilled, expect_reprefill);
  EXPECT_GE(h.sched.stats().preemptions, 1u);
  EXPECT_EQ(h.outputs["a"].size(), 12u);
  EXPECT_EQ(h.outputs["b"].size(), 12u);
  // Recompute is invisible in the output: same tokens as with plenty of memory.
  Harness roomy(small_config());
  roomy.add("a", iota_tokens(8), 12, true);
  roomy.add("b", iota_tokens(8, 100), 12, true);
  ASSERT_EQ(roomy.run_to_completion(), "");
  EXPECT_EQ(h.outputs, roomy.outputs);
}

TEST(Batching, BlockTableIsSentOnceThenAsDeltas) {
  Harness h(small_config());
  h.add("a", iota_tokens(6), 8, true);
  ASSERT_EQ(h.step(), "");
  std::vector<uint32_t> table = h.last_plan.seqs[0].block_ids;
  EXPECT_TRUE(h.last_plan.seqs[0].is_new);
  EXPECT_EQ(table.size(), 2u);
  for (uint32_t pos : {6u, 7u}) {
    ASSERT_EQ(h.step(), "");
    EXPECT_FALSE(h.last_plan.seqs[0].is_new);
    EXPECT_EQ(h.last_plan.seqs[0].start_pos, pos);
    EXPECT_TRUE(h.last_plan.seqs[0].block_ids.empty());
  }
  ASSERT_EQ(h.step(), "");  // position 8 opens the third block
  ASSERT_EQ(h.last_plan.seqs[0].block_ids.size(), 1u);
  EXPECT_EQ(std::count(table.begin(), table.end(), h.last_plan.seqs[0].block_ids[0]), 0);
}

TEST(Batching, FinishConditions) {
  SchedulerConfig c = small_config();
  c.max_context = 12;
  Harness h(c);
  h.sampler = [](const ScheduledSeq& row, int32_t) {
    // Prompts below are 4 tokens; the row ends at prompt + tokens generated so far.
    auto generated_before = row.start_pos + row.token_ids.size() - 4;
    if (row.request_id == "eos" || row.request_id == "ignore") {
      return generated_before == 2 ? kEos : 5;
    }
    if (row.request_id == "stop") return generated_before == 1 ? 7 : 5;
    return 5;
  };
  h.add("eos", iota_tokens(4), 10);
  h.add("ignore", iota_tokens(4), 6, /*ignore_eos=*/true);
  GenerationRequest stop;
  stop.request_id = "stop";
  stop.prompt_ids = iota_tokens(4);
  stop.sampling.max_tokens = 10;
  stop.sampling.ignore_eos = true;
  stop.sampling.stop_token_ids = {7};
  h.sched.add_request(stop);
  h.add("context", iota_tokens(4), 100);
  ASSERT_EQ(h.run_to_completion(), "");
  EXPECT_EQ(h.finished["eos"].reason, FinishReason::kStop);
  EXPECT_EQ(h.finished["eos"].generated_tokens, 3u);
  EXPECT_EQ(h.outputs["eos"].back(), kEos);
  EXPECT_EQ(h.finished["ignore"].reason, FinishReason::kLength);
  EXPECT_EQ(h.finished["ignore"].generated_tokens, 6u);
  EXPECT_EQ(h.finished["stop"].reason, FinishReason::kStop);
  EXPECT_EQ(h.finished["stop"].generated_tokens, 2u);
  EXPECT_EQ(h.finished["context"].reason, FinishReason::kLength);
  EXPECT_EQ(h.finished["context"].generated_tokens, 8u);  // 4 + 8 = max_context
  EXPECT_EQ(h.sched.stats().free_blocks, c.num_blocks);
}

TEST(Batching, AbortMidPrefillMidDecodeAndWhileInFlight) {
  SchedulerConfig c = small_config();
  c.max_batch_tokens = 8;
  Harness h(c);
  h.add("prefill", iota_tokens(40), 5, true);
  ASSERT_EQ(h.step(), "");
  EXPECT_FALSE(h.last_plan.seqs[0].needs_logits);
  EXPECT_TRUE(h.sched.abort("prefill"));
  EXPECT_FALSE(h.sched.abort("prefill"));
  EXPECT_EQ(h.sched.stats().free_blocks, c.num_blocks);
  ASSERT_EQ(h.step(), "");
  ASSERT_EQ(h.last_plan.released.size(), 1u);
  EXPECT_EQ(h.last_plan.released[0].request_id, "prefill");
  EXPECT_TRUE(h.last_plan.empty());

  h.add("decode", iota_tokens(4), 5, true);
  ASSERT_EQ(h.step(), "");
  ASSERT_EQ(h.step(), "");
  EXPECT_TRUE(h.sched.abort("decode"));
  ASSERT_EQ(h.step(), "");
  EXPECT_EQ(h.last_plan.released.size(), 1u);

  h.add("inflight", iota_tokens(4), 5, true);
  StepPlan plan = h.sched.schedule();
  EXPECT_TRUE(h.sched.abort("inflight"));
  UpdateResult r = h.sched.update_from_output(SampledStep{plan.step_id, {5}});
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(h.sched.check_invariants(), "");
  EXPECT_EQ(h.sched.stats().free_blocks, c.num_blocks);
  EXPECT_FALSE(h.sched.has_unfinished());
}

TEST(Batching, AbortWaitingRequest) {
  SchedulerConfig c = small_config();
  c.max_seqs = 1;
  Harness h(c);
  h.add("a", iota_tokens(4), 3, true);
  h.add("b", iota_tokens(4), 3, true);
  ASSERT_EQ(h.step(), "");
  EXPECT_TRUE(h.sched.abort("b"));
  EXPECT_EQ(h.sched.stats().waiting, 0u);
  ASSERT_EQ(h.run_to_completion(), "");
  EXPECT_EQ(h.outputs.count("b"), 0u);
}

TEST(Batching, RejectsRequestsItCanNeverServe) {
  SchedulerConfig c = small_config();
  c.num_blocks = 4;
  c.max_context = 64;
  Scheduler s(c);
  GenerationRequest r;
  r.request_id = "x";
  r.sampling.max_tokens = 1;
  EXPECT_THROW(s.add_request(r), std::invalid_argument);  // empty prompt
  r.prompt_ids = iota_tokens(64);
  EXPECT_THROW(s.add_request(r), std::invalid_argument);  // no room in the context
  r.prompt_ids = iota_tokens(10);
  r.sampling.max_tokens = 20;
  EXPECT_THROW(s.add_request(r), std::invalid_argument);  // more blocks than exist
  r.sampling.max_tokens = 2;
  s.add_request(r);
  EXPECT_THROW(s.add_request(r), std::invalid_argument);  // duplicate id
}

TEST(Batching, StepProtocolIsEnforced) {
  Harness h(small_config());
  h.add("a", iota_tokens(4), 3, true);
  StepPlan p = h.sched.schedule();
  EXPECT_THROW(h.sched.schedule(), std::logic_error);
  EXPECT_THROW(h.sched.update_from_output(SampledStep{p.step_id + 1, {1}}), std::logic_error);
  EXPECT_THROW(h.sched.update_from_output(SampledStep{p.step_id, {1, 2}}), std::invalid_argument);
  h.sched.update_from_output(SampledStep{p.step_id, {1}});
}

TEST(Batching, WorkerLossReprefillsEverythingWithSameOutput) {
  Harness h(small_config());
  h.add("a", iota_tokens(9), 6, true);
  h.add("b", iota_tokens(5, 50), 6, true);
  ASSERT_EQ(h.step(), "");
  ASSERT_EQ(h.step(), "");
  h.sched.schedule();  // this step is lost with the worker
  h.sched.reset_worker_state();
  h.worker = FakeWorker(small_config(), 64);
  StepPlan p = h.sched.schedule();
  EXPECT_EQ(p.released.size(), 2u);
  for (const ScheduledSeq& s : p.seqs) {
    EXPECT_TRUE(s.is_new);
    EXPECT_EQ(s.start_pos, 0u);
  }
  p.released.clear();  // the fresh worker knows nothing to release
  std::vector<int32_t> sampled;
  ASSERT_EQ(h.worker.run(p, sampled), "");
  for (const TokenEvent& t : h.sched.update_from_output(SampledStep{p.step_id, sampled}).tokens) {
    h.outputs[t.request_id].push_back(t.token);
  }
  ASSERT_EQ(h.run_to_completion(), "");
  Harness ref(small_config());
  ref.add("a", iota_tokens(9), 6, true);
  ref.add("b", iota_tokens(5, 50), 6, true);
  ASSERT_EQ(ref.run_to_completion(), "");
  EXPECT_EQ(h.outputs, ref.outputs);
}

// Two decode groups with `steps` plans in flight.
SchedulerConfig decode_group_config(uint32_t steps) {
  SchedulerConfig c = small_config();
  c.max_seqs = 8;
  c.max_steps_in_flight = steps;
  c.decode_groups = 2;
  return c;
}

// Runs a plan made by hand on the harness's worker and applies its result (in any order
// relative to other plans in flight), recording the tokens.
void run_and_apply(Harness& h, const StepPlan& p) {
  std::vector<int32_t> sampled;
  ASSERT_EQ(h.worker.run(p, sampled), "");
  for (const TokenEvent& t : h.sched.update_from_output(SampledStep{p.step_id, sampled}).tokens) {
    h.outputs[t.request_id].push_back(t.token);
  }
  ASSERT_EQ(h.sched.check_invariants(), "");
}

// Two decode groups with two steps in flight: the running sequences split into halves that
// take turns (oldest half first), a sequence is never in two plans in flight, and the outputs
// equal the one-step-at-a-time run.
TEST(Batching, DecodeGroupsTakeTurnsWithTwoStepsInFlight) {
  Harness h(decode_group_config(2));
  const std::vector<std::string> ids{"a", "b", "c", "d"};
  for (size_t i = 0; i < ids.size(); ++i) h.add(ids[i], iota_tokens(3, 10 * static_cast<int32_t>(i) + 1), 8, true);
  ASSERT_EQ(h.step(), "");  // the four prompts in one plan: it samples, the next is empty
  for (int step = 0; step < 6; ++step) {
    // Two plans in flight: the oldest is applied, the other stays busy.
    StepPlan first = h.sched.schedule();
    StepPlan second = h.sched.schedule();
    EXPECT_THROW(h.sched.schedule(), std::logic_error) << "at most max_steps_in_flight";
    ASSERT_EQ(first.seqs.size(), 2u) << "step " << step;
    ASSERT_EQ(second.seqs.size(), 2u);
    EXPECT_EQ(first.seqs[0].request_id, "a");
    EXPECT_EQ(first.seqs[1].request_id, "b");
    EXPECT_EQ(second.seqs[0].request_id, "c");
    EXPECT_EQ(second.seqs[1].request_id, "d");
    for (const StepPlan* p : {&first, &second}) ASSERT_NO_FATAL_FAILURE(run_and_apply(h, *p));
  }
  ASSERT_EQ(h.run_to_completion(), "");
  Harness ref(small_config());
  for (size_t i = 0; i < ids.size(); ++i) ref.add(ids[i], iota_tokens(3, 10 * static_cast<int32_t>(i) + 1), 8, true);
  ASSERT_EQ(ref.run_to_completion(), "");
  EXPECT_EQ(h.outputs, ref.outputs);
}

// A sequence left over by the per-plan cap waits for the next decode plan instead of forming a
// third group: at most decode_groups plans with decode rows are in flight.
TEST(Batching, LeftOverSequenceJoinsTheNextGroupInsteadOfItsOwn) {
  Harness h(decode_group_config(3));
  for (const char* id : {"a", "b", "c", "d"}) h.add(id, iota_tokens(3, 7), 8, true);
  h.add("e", iota_tokens(3, 7), 2, true);  // ends after its first decode row
  ASSERT_EQ(h.step(), "");                 // the five prompts in one plan
  auto run = [&](const StepPlan& p) { run_and_apply(h, p); };
  auto ids = [](const StepPlan& p) {
    std::string out;
    for (const ScheduledSeq& s : p.seqs) out += s.request_id;
    return out;
  };
  const StepPlan p1 = h.sched.schedule();  // ceil(5 / 2) = 3 rows
  const StepPlan p2 = h.sched.schedule();
  EXPECT_EQ(ids(p1), "abc");
  EXPECT_EQ(ids(p2), "de");
  run(p2);  // "e" finishes: 4 running, cap 2
  const StepPlan p3 = h.sched.schedule();
  EXPECT_EQ(ids(p3), "d");
  run(p1);
  const StepPlan p4 = h.sched.schedule();
  EXPECT_EQ(ids(p4), "ab");
  EXPECT_TRUE(h.sched.schedule().empty()) << "\"c\" must not decode alone while two decode plans are out";
  run(p3);
  const StepPlan p5 = h.sched.schedule();
  EXPECT_EQ(ids(p5), "cd");
}

// A sequence that needs a block while every other one is busy waits for their results instead
// of preempting one of them (their rows are being computed).
TEST(Batching, NeverPreemptsASequenceInFlight) {
  SchedulerConfig c = decode_group_config(2);
  c.num_blocks = 4;  // 16 positions
  Harness h(c);
  h.add("old", iota_tokens(7), 8, true);
  h.add("young", iota_tokens(7, 40), 8, true);
  ASSERT_EQ(h.step(), "");              // both prompts: 2 blocks each, all memory in use
  StepPlan first = h.sched.schedule();  // "old" decodes at position 7 (its block 2 has room)
  ASSERT_EQ(first.seqs.size(), 1u);
  EXPECT_EQ(first.seqs[0].request_id, "old");
  StepPlan second = h.sched.schedule();  // "young" too
  ASSERT_EQ(second.seqs.size(), 1u);
  std::vector<int32_t> sampled;
  ASSERT_EQ(h.worker.run(first, sampled), "");
  h.sched.update_from_output(SampledStep{first.step_id, sampled});
  // "old" is at position 8 and needs a third block: none is free and "young" is busy.
  StepPlan third = h.sched.schedule();
  EXPECT_TRUE(third.empty());
  EXPECT_TRUE(third.released.empty()) << "the busy sequence was preempted";
  std::vector<int32_t> sampled2;
  ASSERT_EQ(h.worker.run(second, sampled2), "");
  ASSERT_EQ(h.worker.run(third, sampled), "");
  h.sched.update_from_output(SampledStep{second.step_id, sampled2});
  // Now "young" is not busy: it is preempted for "old" (the youngest), as with one step.
  StepPlan fourth = h.sched.schedule();
  ASSERT_EQ(fourth.released.size(), 1u);
  EXPECT_EQ(fourth.released[0].request_id, "young");
  EXPECT_EQ(h.sched.check_invariants(), "");
}

}  // namespace
}  // namespace ds::test
