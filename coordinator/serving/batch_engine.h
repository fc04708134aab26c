// The serving engine: the continuous-batching scheduler driving the worker pipeline.
// One thread (the engine loop) owns the Scheduler and the PipelineEngine, which are both
// single-threaded; HTTP threads only enqueue submissions / cancellations and read health.
//
// Each loop turn: take new requests and cancellations, plan steps until max_plans_in_flight
// are in flight or nothing else can run (with the scheduler's memory placement: state slots,
// block tables, snapshots, and the sequences released since the last step), collect the
// oldest step's result, feed its sampled tokens back, and report tokens and finishes to the
// request sinks. A sequence sits out plans while it is in one in flight; a plan that only
// computes prefill chunks is applied to the scheduler as soon as it is sent (it samples
// nothing), so a long prompt's chunks pipeline over the stages; with decode groups
// (SchedulerConfig::decode_groups) the running sequences take turns in that many plans, so
// every stage has a batch to decode. At most decode_groups plans that sample are in flight. A lost worker triggers
// recovery: the pipeline waits for the restarted worker, the scheduler re-prefills every live sequence from its tokens,
// and clients only see a pause.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/logit_adjust.h"
#include "common/sampling.h"
#include "common/stage_types.h"
#include "coordinator/scheduler/scheduler.h"
#include "coordinator/serving/generation.h"
#include "coordinator/serving/output_constraint.h"
#include "coordinator/serving/parallel_for.h"

namespace ds {

class PipelineEngine;
struct RowResult;
struct SeqRequest;
struct StepOutcome;

// The worker memory a scheduler plans with: the pipeline's EngineOptions::cache must equal it
// (BatchEngine checks), so the scheduler never places a sequence in memory a worker lacks.
CacheGeometry worker_cache_geometry(const SchedulerConfig& scheduler);

struct BatchEngineOptions {
  SchedulerConfig scheduler;
  int idle_pump_ms = 50;         // while idle, control traffic is handled this often (a request wakes the loop at once)
  uint32_t max_recoveries = 16;  // worker losses tolerated in a row before failing requests
  // Plans in flight at once (at least scheduler.decode_groups; the scheduler's
  // max_steps_in_flight is set to it). 1 = one plan at a time.
  uint32_t max_plans_in_flight = 1;
  // What the workers' KV pools hold, for /metrics (EngineHealth): the types' name and bytes per token.
  std::string kv_cache_type = "f32";
  uint64_t kv_bytes_per_token = 0;
};

class BatchEngine final : public Engine {
 public:
  // `pipeline` must be started and outlive this object, and its cache_geometry() must hold at
  // least worker_cache_geometry(options.scheduler), same block size (else std::invalid_argument).
  BatchEngine(PipelineEngine& pipeline, BatchEngineOptions options);
  ~BatchEngine() override;  // stop()
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  void start();  // launches the engine loop
  // Cancels every request (sinks get kCancelled) and joins the loop.
  void stop();

  void submit(GenerationRequest request, std::shared_ptr<GenerationSink> sink) override;
  void cancel(const std::string& request_id) override;
  EngineHealth health() const override;

 private:
  struct Active {
    std::shared_ptr<GenerationSink> sink;
    uint64_t seq_id = 0;
    SamplingRule rule;
    LogitAdjust adjust;
    std::mt19937_64 rng;
    uint32_t prompt_tokens = 0;
    bool want_top = false;
    uint32_t top_logprobs = 0;
    // SamplingParams::prompt_logprobs: the prompt, and entry p = the logprob of prompt token
    // p + 1 (from the row at position p), filled as the prompt's chunks come back.
    std::vector<int32_t> prompt;
    std::vector<GeneratedToken> prompt_logprobs;
    std::optional<OutputConstraintState> constraint;  // structured outputs
    bool pooled = false;                              // GenerationRequest::pooled
    std::vector<PromptImage> images;                  // vision input: spans + pixels, for every re-prefill
  };

  // A plan sent to the workers whose result is not collected yet.
  struct Flying {
    StepPlan plan;
    std::vector<uint64_t> released;  // seq ids the workers forget before it
    bool delivered = false;          // it samples nothing and was applied when sent
  };

  void loop();
  void take_inbox();
  bool send_next_plan();
  size_t sampling_in_flight() const;
  void run_step();
  void drain_pipeline();
  void deliver(const StepOutcome& outcome, const StepPlan& plan);
  void take_prompt_logprobs(const StepOutcome& outcome, const StepPlan& plan);
  GeneratedToken generated_token(const Active& a, const RowResult& row) const;
  void finish(const std::string& id, FinishReason reason, const std::string& error);
  void fail_all(const std::string& error, FinishReason reason = FinishReason::kError);
  void note_released(const StepPlan& plan);
  SeqRequest request_of(const ScheduledSeq& s);
  struct ConstrainedRow {
    size_t seq;                    // index in the plan
    OutputConstraintState* state;  // its request's matcher
  };
  std::vector<ConstrainedRow> constrained_rows(const StepPlan& plan, std::vector<SeqRequest>* reqs);
  void fill_constraint_masks(const std::vector<ConstrainedRow>& rows, const StepPlan& plan,
                             std::vector<SeqRequest>& reqs);
  // Advances a constrained request over an emitted token; false (and `ends` set) when the
  // request must end after it: the grammar refused the token, or is complete.
  bool constraint_allows_more(Active& a, const std::string& id, int32_t token,
                              std::vector<std::pair<std::string, std::string>>& ends);
  void update_health();

  PipelineEngine& pipeline_;
  BatchEngineOptions opt_;
  Scheduler scheduler_;
  std::unordered_map<std::string, Active> active_;  // loop thread only
  // Sequences the workers hold a placement for (request id -> seq id), and placements ended
  // by the scheduler but not yet told to the workers (they ride on the next step).
  std::unordered_map<std::string, uint64_t> placed_;
  std::vector<uint64_t> to_release_;
  uint64_t next_seq_id_ = 1;
  std::deque<Flying> flying_;  // oldest first
  uint64_t steps_ = 0;         // EngineHealth::steps, step_host_seconds, step_wait_seconds
  double host_seconds_ = 0;
  double wait_seconds_ = 0;
  uint32_t recoveries_in_a_row_ = 0;
  bool pipelined_once_ = false;             // several plans were in flight at once (logged once)
  std::unique_ptr<ParallelFor> mask_pool_;  // made on the first constrained step

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<GenerationRequest, std::shared_ptr<GenerationSink>>> inbox_;
  // Submissions the loop took from the inbox and has not yet counted in health_ (between the
  // swap and update_health): without them health() would count those requests nowhere.
  uint32_t taking_ = 0;
  std::vector<std::string> cancels_;
  bool stopping_ = false;
  EngineHealth health_;
  std::thread thread_;
};

}  // namespace ds
