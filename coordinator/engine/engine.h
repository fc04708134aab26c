// The coordinator's pipeline engine: starts (or waits for) the workers, assigns each its layer
// slice, runs steps through all stages and returns the logit digests, watches heartbeats and
// recovers from a worker crash. Single-threaded: every call happens on the caller's thread,
// which also drives the control traffic (pump()). No ZeroMQ or protobuf type in this header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/sampling.h"     // SamplingRule
#include "worker/stage_model.h"  // StageRange, CacheGeometry, SeqCache

namespace ds {

// Every switch of the engine, filled once by the process's option parser.
struct EngineOptions {
  std::string model_path;               // GGUF; workers mmap the same path
  uint32_t n_workers = 1;               // pipeline stages
  std::string backend = "cpu";          // cpu | cuda
  std::vector<int> devices;             // cuda: GPU of each rank (local workers); empty = rank r on GPU r
  std::vector<uint32_t> layer_split;    // layers per stage; empty = balance by weight bytes
  int threads_per_worker = 1;
  bool external_workers = false;        // workers are started by someone else (systemd, by hand)
  std::string control_endpoint;         // empty: a private ipc:// directory
  std::string worker_binary;            // empty: deltaserve-worker next to this executable
  std::vector<std::string> worker_extra_args;
  int heartbeat_timeout_ms = 1500;      // silent this long = dead (heartbeats come every 200 ms)
  int startup_timeout_ms = 120000;      // all workers Ready (also bounds recovery)
  int step_timeout_ms = 600000;         // no result for this long = the step is lost
  uint64_t memory_budget_bytes = 0;     // per worker, 0 = no limit
  uint32_t max_context = 0;             // 0 = the model's context length
  // Worker memory, sent in Assign and sized once per worker start. num_blocks == 0: no
  // scheduler, the workers place sequences themselves (steps carry no SeqRequest::cache).
  // Otherwise every step must place every sequence, with exactly these pool sizes.
  CacheGeometry cache;
};

// One sequence's part of a step. A new sequence starts at position 0 with its prompt (chunk)
// (or, placed by a scheduler, at a prefix-cache hit); a running one sends only its new token(s)
// at the next position.
struct SeqRequest {
  uint64_t seq_id = 0;
  uint32_t start_pos = 0;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> logit_rows;   // rows of `tokens` whose logits are wanted
  std::vector<double> random_u;       // one uniform number in [0,1) per logit row (sampling)
  SamplingRule sampling;            // sent to the workers only when new or changed
  bool return_full_logits = false;
  std::optional<SeqCache> cache;      // where the scheduler placed it (set iff EngineOptions::cache is managed)
};

struct RowResult {
  uint64_t seq_id = 0;
  uint32_t row = 0;                   // row within the sequence's tokens of the step
  int32_t token = -1;                 // sampling rule's pick for the row's random_u
  double logsumexp = 0;
  float token_logprob = 0;            // log-probability of `token`
  std::vector<int32_t> top_ids;       // best first
  std::vector<float> top_logprobs;
  std::vector<float> logits;          // full row, only with return_full_logits
};

struct StageTime {
  uint32_t rank = 0;
  uint64_t compute_us = 0;
};

struct StepOutcome {
  std::vector<RowResult> rows;        // in request order (sequence, then its logit rows)
  std::vector<StageTime> timings;     // per stage
  uint64_t wall_us = 0;               // send to result, as seen by the coordinator
};

struct WorkerInfo {
  uint32_t rank = 0;
  StageRange layers;
  std::string state;                  // absent | loading | ready | failed
  uint32_t pid = 0;
  uint32_t restarts = 0;              // supervisor restarts (local workers)
  uint64_t weight_bytes = 0;
};

// A stage died, restarted or stopped answering: sequence state on the workers is lost. Call
// recover(), then re-prefill the live sequences.
class WorkerLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A stage rejected the step (invalid input). Other sequences' state is intact.
class StepFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class PipelineEngine {
 public:
  explicit PipelineEngine(EngineOptions options);
  ~PipelineEngine();  // shutdown()
  PipelineEngine(const PipelineEngine&) = delete;
  PipelineEngine& operator=(const PipelineEngine&) = delete;

  // Binds the control socket, starts the workers (unless external) and waits until every
  // stage is Ready. Throws std::runtime_error with the reason (a worker's load failure, timeout).
  void start();
  // Runs one step through the pipeline. `released`: sequences the workers forget before the
  // step (their placement ended; see StepPlan.released_seq_ids). Throws WorkerLost or StepFailed.
  StepOutcome step(const std::vector<SeqRequest>& seqs, const std::vector<uint64_t>& released = {});
  // Frees the sequences' state on every worker.
  void drop_sequences(const std::vector<uint64_t>& seq_ids);
  // After WorkerLost: waits until every stage is Ready again and drops all sequence state on
  // every worker. Throws std::runtime_error when the workers do not come back in time.
  void recover();
  // Handles control traffic (heartbeats, restarts) for up to timeout_ms; for idle loops.
  void pump(int timeout_ms);
  // Asks the workers to exit, stops local ones and removes the private ipc directory.
  void shutdown();

  bool needs_recovery() const;
  const CacheGeometry& cache_geometry() const;
  const std::vector<StageRange>& layout() const;
  std::vector<WorkerInfo> workers() const;
  uint32_t n_vocab() const;
  uint32_t n_layer() const;
  const std::string& control_endpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds
