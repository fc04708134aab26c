// Test stand-ins for the workers. In fake memory a KV entry is the token it was computed
// from and a GDN state is the token history folded into it, so any mistake in block
// tables, positions, slots or snapshots shows up as a mismatch, and the "model" (a hash
// of the state) samples the same tokens whatever the batching, preemption or caching.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "coordinator/scheduler/scheduler.h"

namespace ds::test {

constexpr int32_t kEos = 0;

// The fake model's next token for a history: a hash, in [0, vocab).
int32_t fake_model_token(std::span<const int32_t> history, uint32_t vocab);

class FakeWorker {
 public:
  FakeWorker(const SchedulerConfig& config, uint32_t vocab);
  // Executes a plan in the documented order (release, setup, compute, save) and fills
  // one sampled token per row (-1 where no logits). Returns "" or the first inconsistency.
  std::string run(const StepPlan& plan, std::vector<int32_t>& sampled);
  uint64_t computed_tokens() const { return computed_tokens_; }
  // Speculative rows of the last run, parallel to its rows: drafts accepted (greedy rule
  // against the fake model) and drafts proposed (the fake model's continuation, each draft
  // wrong with probability 1/4, from a fixed seed), as SampledStep carries them.
  const std::vector<uint32_t>& accepted() const { return accepted_; }
  const std::vector<std::vector<int32_t>>& drafts() const { return drafts_; }
  uint32_t max_context = 0;  // > 0: positions the MTP draft rows reach must stay below it

 private:
  std::string release(const ReleasedSeq& r);
  std::string setup(const ScheduledSeq& row);
  std::string compute(const ScheduledSeq& row);
  std::string speculate(const ScheduledSeq& row, size_t i, std::vector<int32_t>& sampled);

  uint32_t block_size_;
  uint32_t vocab_;
  bool stateless_;  // SchedulerConfig::stateless: a new row's history comes from its shared blocks
  std::vector<std::vector<int32_t>> kv_;     // per block, one token per position
  std::vector<std::vector<int32_t>> state_;  // per slot: tokens folded in
  std::vector<std::string> owner_;           // per slot: request id, "" when free
  std::vector<std::optional<std::vector<int32_t>>> snapshots_;
  std::map<std::string, std::vector<uint32_t>> tables_;
  uint64_t computed_tokens_ = 0;
  std::vector<uint32_t> accepted_;
  std::vector<std::vector<int32_t>> drafts_;
  uint64_t draft_rng_ = 0x9e3779b97f4a7c15ULL;
};

// Scheduler + fake worker driven step by step; collects outputs and finish events. With
// config.max_steps_in_flight > 1 it keeps that many plans in flight like the serving engine:
// the worker runs each plan when it is made (the workers run plans in order, so that is when
// its result is fixed), and results are applied oldest first, a plan that samples nothing at
// once (the engine's prefill pipelining).
struct Harness {
  explicit Harness(const SchedulerConfig& config, uint32_t vocab = 64);

  void add(const std::string& id, std::vector<int32_t> prompt, uint32_t max_tokens, bool ignore_eos = false);
  // One step: schedule (up to max_steps_in_flight plans), run on the worker, feed back the
  // oldest; "" or what went wrong.
  std::string step();
  // Steps until no request is left; "" or the first error.
  std::string run_to_completion(int max_steps = 100000);

  Scheduler sched;
  FakeWorker worker;
  StepPlan last_plan;
  // Replaces the model's token for a row (default: keep it).
  std::function<int32_t(const ScheduledSeq&, int32_t)> sampler;
  std::map<std::string, std::vector<int32_t>> outputs;
  std::map<std::string, FinishEvent> finished;
  uint32_t most_in_flight = 0;  // steps in flight at once, at most, so far

 private:
  struct Flying {
    StepPlan plan;
    SampledStep out;
    bool applied = false;
  };
  std::string submit(bool& submitted);
  std::string apply(const Flying& f);
  std::deque<Flying> flying_;
};

std::vector<int32_t> iota_tokens(uint32_t n, int32_t first = 1);

}  // namespace ds::test
