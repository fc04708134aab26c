// Continuous-batching scheduler: pure CPU, no CUDA / ZeroMQ. Each step:
//   plan = schedule();  send plan to workers;  update_from_output(sampled tokens).
// Up to max_steps_in_flight steps may be in flight: a sequence in a step whose result is not
// in yet is busy and sits out later plans; the workers run plans in the order they were made,
// so every plan sees the memory the earlier ones wrote. Every sequence has `num_computed` and `num_tokens`
// (prompt + generated); a step computes min(num_tokens - num_computed, budget left) of
// them, so prefill chunks and decode tokens share one rule and one token budget.
//
// Policy per step: decode rows of running sequences first (oldest first), then the next
// chunks of partially prefilled running sequences, then new sequences from the waiting
// queue in arrival order (FCFS: the head blocks the rest), up to max_seqs live ones. When
// KV blocks run out the youngest running sequence not yet in this step is preempted by
// recompute: its blocks and slot are freed and it goes back to the front of the queue.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/scheduler/prefix_cache.h"
#include "coordinator/scheduler/sequence.h"
#include "coordinator/scheduler/slot_pool.h"
#include "coordinator/scheduler/snapshot_store.h"
#include "coordinator/scheduler/step_plan.h"
#include "coordinator/serving/generation.h"

namespace ds {

// Most drafts one step may verify: the workers keep that many GDN states per sequence for
// rollback (StatePool::kMaxCaptures).
constexpr uint32_t kMaxSpecK = 4;

struct SchedulerConfig {
  uint32_t block_size = 16;          // tokens per KV block
  uint32_t num_blocks = 0;           // KV blocks the workers hold (reported at warmup)
  uint32_t max_batch_tokens = 2048;  // token budget of one step
  uint32_t max_seqs = 64;            // live sequences = GDN state slots
  uint32_t max_context = 4096;       // tokens per sequence, prompt + generated
  uint32_t watermark_blocks = 0;     // kept free when admitting next to running sequences
  uint32_t num_snapshots = 0;        // GDN snapshot buffers; 0 disables the prefix cache
  // A model without recurrent layers (qwen3): every cached block boundary is a usable prefix,
  // no snapshot is needed or kept, and the prefix cache is on whatever num_snapshots says.
  bool stateless = false;
  bool snapshot_decode = true;  // also snapshot generated text at block ends
  // MTP speculative decoding: drafts proposed per step (0 = off, at most 4, the workers'
  // rollback depth). A sequence's blocks then cover spec_k positions past its row (draft rows).
  uint32_t spec_k = 0;
  // Plans made before the earlier ones' results are in (schedule() throws beyond). Results may
  // be applied in any order; the workers must run the plans in the order they were made.
  uint32_t max_steps_in_flight = 1;
  // Decode rows per plan are capped at ceil(running / decode_groups), and at most this many
  // steps with decode rows are in flight, so the running sequences fall into this many groups
  // that take turns: with stages on different devices, group B goes through stage 0 while
  // group A is on stage 1 (steps in flight >= groups needed). Without the second rule, a
  // sequence left over by the cap would form a group of its own, a whole extra weight read
  // per round.
  uint32_t decode_groups = 1;
  uint64_t hash_seed = 0x6473636865647531ULL;  // pass a random one in production
  std::vector<int32_t> eos_token_ids;
};

struct SchedulerStats {
  uint32_t waiting = 0;
  uint32_t running = 0;
  uint32_t free_blocks = 0;
  uint32_t free_slots = 0;
  uint32_t snapshots = 0;
  uint64_t preemptions = 0;
  uint64_t prefix_queried_tokens = 0;  // prompt tokens looked up on admission
  uint64_t prefix_hit_tokens = 0;      // of those, reused
  uint64_t block_evictions = 0;
  uint64_t snapshot_evictions = 0;
  SpecCounts spec = {};  // speculative decoding since start
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config);

  // Queues a request. Throws std::invalid_argument for one that can never be served.
  void add_request(const GenerationRequest& request);
  // Plans the next step from the sequences not in a step in flight (empty when none can run).
  // Throws std::logic_error while max_steps_in_flight steps are in flight.
  StepPlan schedule();
  // Applies the sampled tokens of a step in flight (any of them): appends them, finishes
  // sequences and frees their resources (their slots are released in the next plan).
  UpdateResult update_from_output(const SampledStep& output);
  // Drops a request wherever it is. False when unknown or already finished.
  bool abort(const std::string& request_id);
  // Workers lost their memory (restart): every live sequence is re-prefilled from its
  // tokens, the prefix cache is emptied, and an in-flight step is forgotten.
  void reset_worker_state();

  bool has_unfinished() const { return !seqs_.empty(); }
  size_t steps_in_flight() const { return in_flight_.size(); }
  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return config_; }
  // Empty when every allocator / slot / snapshot invariant holds (for tests).
  std::string check_invariants() const;

 private:
  struct InFlight {
    uint64_t step_id = 0;
    std::vector<std::pair<std::string, uint64_t>> rows;  // request id, uid
    std::vector<uint32_t> pending_snapshots;
    bool decodes = false;  // it has decode rows (counts against decode_groups)
  };

  // scheduler.cpp: planning
  void schedule_running(StepPlan& plan, uint32_t& budget, bool decode);
  bool schedule_running_seq(Sequence& s, StepPlan& plan, uint32_t& budget);
  void schedule_waiting(StepPlan& plan, uint32_t& budget);
  bool try_admit(Sequence& s, StepPlan& plan, uint32_t& budget);
  uint32_t chunk_end(const Sequence& s, uint32_t start, uint32_t budget) const;
  uint32_t capacity_end(size_t held_blocks, uint32_t free_blocks) const;
  struct RowSpec {
    uint32_t n_draft = 0;
    uint32_t spec_k = 0;
    uint32_t lookahead = 0;  // positions past the row's end its blocks must cover
  };
  RowSpec plan_speculation(const Sequence& s, uint32_t end, uint32_t budget, uint32_t capacity) const;
  void grow_blocks(Sequence& s, uint32_t end);
  void emit_row(Sequence& s, uint32_t end, const RowSpec& spec, StepPlan& plan, uint32_t& budget);
  std::optional<uint32_t> plan_snapshot(Sequence& s, uint32_t start, uint32_t end);
  void set_snapshot_target(Sequence& s, uint32_t start);
  Sequence* youngest_unscheduled();
  bool available(const Sequence& s) const;
  uint32_t decode_rows_per_step() const;
  bool may_plan_decode_rows() const;
  void preempt(Sequence& s, std::vector<ReleasedSeq>& released);
  bool cache_enabled() const { return config_.num_snapshots > 0 || config_.stateless; }

  // scheduler_update.cpp: results and bookkeeping
  void publish_computed(Sequence& s, uint32_t end);
  bool apply_row_output(Sequence& s, const SampledStep& output, size_t row, UpdateResult& result);
  bool append_token(Sequence& s, int32_t token, UpdateResult& result);
  std::optional<FinishReason> finish_reason(const Sequence& s) const;
  void finish(Sequence& s, FinishReason reason, UpdateResult& result);
  void free_resources(Sequence& s, std::vector<ReleasedSeq>& released);
  void remove_running(const Sequence& s);
  std::string check_sequences() const;

  SchedulerConfig config_;
  BlockAllocator blocks_;
  SlotPool slots_;
  SnapshotStore snapshots_;
  PrefixCache prefix_;
  std::unordered_set<int32_t> eos_;

  std::unordered_map<std::string, std::unique_ptr<Sequence>> seqs_;  // live requests
  std::deque<Sequence*> waiting_;                                    // front is served first
  std::vector<Sequence*> running_;                                   // admission order: back is the youngest
  std::vector<ReleasedSeq> pending_releases_;
  std::unordered_set<uint64_t> scheduled_;  // uids in the plan being built
  std::deque<InFlight> in_flight_;          // oldest first
  std::unordered_set<uint64_t> busy_;       // uids in a step in flight
  InFlight building_;
  uint64_t next_uid_ = 1;
  uint64_t next_step_ = 1;
  SchedulerStats counters_;
};

}  // namespace ds
