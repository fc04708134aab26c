// The coordinator's pipeline engine: starts (or waits for) the workers, assigns each its layer
// slice, runs steps through all stages and returns the logit digests, watches heartbeats and
// recovers from a worker crash. Single-threaded: every call happens on the caller's thread,
// which also drives the control traffic (pump()). No ZeroMQ or protobuf type in this header.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/image_patches.h"  // RgbImage
#include "common/image_span.h"     // ImageSpan
#include "common/logit_adjust.h"
#include "common/sampling.h"  // SamplingRule
#include "common/stage_types.h"

namespace ds {

// How the workers size their pools from EngineOptions::cache (Assign.cache_sizing).
enum class CacheSizing {
  kExact,      // every worker allocates exactly `cache`, or fails to load
  kFitBudget,  // `cache` holds upper bounds: each worker allocates what fits its memory budget
               // and reports it at Ready; start() adopts the minimum over the workers
               // (cache_geometry()), and workers restarted later get exactly that
};

// Every switch of the engine, filled once by the process's option parser.
struct EngineOptions {
  std::string model_path;   // GGUF; workers mmap the same path
  std::string mmproj_path;  // vision tower GGUF (Assign.mmproj_path, opened by stage 0); empty: text only
  // The most tokens of one image (Assign.image_max_tokens: stage 0 sets the vision tower's
  // workspace for it aside from its pools; 0 = the workers' default, 4096).
  uint32_t image_max_tokens = 0;
  uint32_t n_workers = 1;       // pipeline stages
  std::string backend = "cpu";  // cpu | cuda
  std::vector<int> devices;     // cuda: GPU of each rank (local workers); empty = rank r on GPU r
  // cuda: share of each GPU's memory its local workers may use (weights + pools), split among
  // the workers on one GPU by layer count (gpu_share.h) and passed as each one's
  // --gpu-memory-fraction. Unset: a worker alone on its GPU keeps its own default; workers
  // sharing a GPU split kDefaultGpuMemoryFraction.
  std::optional<double> gpu_memory_fraction;
  std::vector<uint32_t> layer_split;  // layers per stage; empty = balance by weight bytes
  int threads_per_worker = 1;
  bool external_workers = false;  // workers are started by someone else (systemd, by hand)
  std::string control_endpoint;   // empty: a private ipc:// directory
  std::string worker_binary;      // empty: deltaserve-worker next to this executable
  // Sent to every worker in Assign (they apply them over their own flags): the cuda workers'
  // prefill precision, decode GEMV and bf16 weight copy, and the pools' budget (0: each
  // worker's own --memory-budget).
  std::string prefill_precision = "bf16";
  // What the last stage returns (Assign.output_head): the LM head's tokens, or a pooling
  // model's outputs (RowResult::pooled).
  OutputHead output_head = OutputHead::kLanguageModel;
  std::string decode_gemv = "auto";
  std::string bf16_weight_copy = "off";
  uint64_t pool_budget_bytes = 0;
  std::vector<std::string> worker_extra_args;
  // Hidden states between local workers: "auto" (a shared-memory ring between stages on one
  // host, inline across hosts) or "inline" (always in the ZeroMQ message); passed to the
  // workers this engine starts as --hidden-transport.
  std::string hidden_transport = "auto";
  // Stage 0 hands a ring chunk over before its rows land ("on", the workers' default; its device
  // marks the slot; "host": stage 1's host waits for the mark) or after ("off"); passed on as
  // --early-handoff.
  std::string early_handoff = "on";
  // While a step is in flight the engine polls for its result without sleeping, so the result
  // costs no thread wake-up (part of each decode step was spent outside compute: docs/PERFORMANCE.md,
  // Decisions measured, busy polling).
  // "auto": on with cuda workers (one busy core while serving), off with cpu workers (they need
  // the cores); "on" / "off".
  std::string busy_poll = "auto";
  // Local CUDA workers sharing a GPU run under a private CUDA MPS daemon the engine starts
  // (mps_daemon.h): "auto" (default: when none already serves this process; if it cannot
  // start, the workers run without it and a warning says so), "on" (always our own; failing to
  // start it fails start()) or "off". Workers on GPUs of their own never need it.
  std::string mps = "auto";
  int heartbeat_timeout_ms = 1500;  // silent this long = dead (heartbeats come every 200 ms)
  // The workers' heartbeat period: a worker not heard from for one and a half of them (one
  // heartbeat missed, with room for jitter) is reported as not serving (serving_workers(),
  // /ready), long before it is declared dead.
  int heartbeat_interval_ms = 200;
  int startup_timeout_ms = 120000;   // all workers Ready (also bounds recovery)
  int step_timeout_ms = 600000;      // no result for this long = the step is lost
  uint64_t memory_budget_bytes = 0;  // per worker, 0 = no limit
  uint32_t max_context = 0;          // 0 = the model's context length
  // Worker memory, sent in Assign and sized once per worker start. num_blocks == 0: no
  // scheduler, the workers place sequences themselves (steps carry no SeqRequest::cache).
  // Otherwise every step must place every sequence, with exactly these pool sizes.
  CacheGeometry cache;
  CacheSizing cache_sizing = CacheSizing::kExact;
  // MTP drafts per step the scheduler may plan (Assign.spec_k): managed workers size and
  // allocate each slot's speculation rollback records with their pools. 0 = no speculation.
  uint32_t spec_k = 0;
  uint32_t draft_vocab = 0;         // Assign.draft_vocab: drafts among ids below it; 0 = every id
  bool require_num_blocks = false;  // kFitBudget: start() fails unless every worker holds all cache.num_blocks
};

// The pixels of one image (already resized to the size its span's grid says), named by the
// ImageSpan::hash of its span; shared by the request and every step that carries it.
struct ImagePixelsRef {
  uint64_t hash = 0;
  std::shared_ptr<const RgbImage> image;
};

// One sequence's part of a step. A new sequence starts at position 0 with its prompt (chunk)
// (or, placed by a scheduler, at a prefix-cache hit); a running one sends only its new token(s)
// at the next position.
struct SeqRequest {
  uint64_t seq_id = 0;
  uint32_t start_pos = 0;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> logit_rows;  // rows of `tokens` whose logits are wanted
  std::vector<double> random_u;      // one uniform number in [0,1) per logit row (sampling)
  // Empty, or one per logit row: >= 0 = that row's token is this id (prompt logprobs: its
  // logprob is reported, nothing sampled, no logit edits), -1 = sampled. Not with speculation.
  std::vector<int32_t> forced_tokens;
  // Grammar masks (structured outputs): `mask_rows` index logit_rows (increasing); each has a
  // mask of mask_words words in mask_bits (common/token_mask.h). Empty: no row is limited.
  // They travel after the plan (PipelineEngine::send_masks), so a caller may fill them once
  // the plan is out: `masks_follow` says they will come (the plan then tells the last stage to
  // wait for them), and masks already filled at submit() are sent with it.
  bool masks_follow = false;
  std::vector<uint32_t> mask_rows;
  uint32_t mask_words = 0;
  std::vector<uint32_t> mask_bits;
  SamplingRule sampling;  // sent to the workers only when new or changed
  LogitAdjust adjust;     // logit_bias, min_tokens, penalties (likewise)
  // With penalties, on a row that restarts past position 0 (cache.is_new): the tokens of
  // positions [0, start_pos), which the last stage counts.
  std::vector<int32_t> history;
  bool return_full_logits = false;
  std::optional<SeqCache> cache;  // where the scheduler placed it (set iff EngineOptions::cache is managed)
  // Speculative decoding (see StepPlan in step.proto): the last n_draft tokens are drafts (the
  // logit rows must then be the last n_draft + 1), `rewind` rolls back to start_pos, spec_k new
  // drafts are wanted; spec_random_u = n_draft acceptance + spec_k draft numbers (rows with logits).
  uint32_t n_draft = 0;
  bool rewind = false;
  uint32_t spec_k = 0;
  std::vector<double> spec_random_u = {};
  // Vision input: every image of the sequence that starts before the row ends (all stages need
  // them for the M-RoPE positions), and the pixels of those with token rows in this row (stage 0
  // embeds them; an image split over chunks comes with each). Pixels are shared, never copied
  // per step; the codec puts each hash once into the plan.
  std::vector<ImageSpan> images = {};
  std::vector<ImagePixelsRef> image_pixels = {};
  bool speculates() const { return n_draft > 0 || spec_k > 0; }
};

struct RowResult {
  uint64_t seq_id = 0;
  uint32_t row = 0;     // row within the sequence's tokens of the step
  int32_t token = -1;   // sampling rule's pick for the row's random_u (or the forced id)
  bool forced = false;  // the row's token was forced (SeqRequest::forced_tokens)
  double logsumexp = 0;
  float token_logprob = 0;       // log-probability of `token`
  std::vector<int32_t> top_ids;  // best first
  std::vector<float> top_logprobs;
  std::vector<float> logits;  // full row, only with return_full_logits
  // Pooling models (EngineOptions::output_head not the LM head): the row's pooled output, the
  // final-normed hidden state (embedding) or the classifier logits (rank); `token` means nothing.
  std::vector<float> pooled;
};

// A speculating sequence's verdict: `accepted` drafts of its row were kept (its RowResults
// 0..accepted hold the emitted tokens) and `drafts` are proposed for its next step.
struct SpecResult {
  uint64_t seq_id = 0;
  uint32_t accepted = 0;
  std::vector<int32_t> drafts;
};

struct StageTime {
  uint32_t rank = 0;
  uint64_t compute_us = 0;
  bool input_from_shm = false;  // its input came through a shared-memory ring (same-host stages)
};

struct StepOutcome {
  std::vector<RowResult> rows;        // in request order (sequence, then its logit rows)
  std::vector<SpecResult> spec = {};  // speculating sequences with logits, in request order
  std::vector<StageTime> timings;     // per stage
  uint64_t wall_us = 0;               // send to result, as seen by the coordinator
};

// Thread-safe view of the workers for readiness probes.
struct WorkerPulse {
  uint32_t total = 0;
  uint32_t serving = 0;  // Ready and heard from within 1.5 heartbeat periods
};

struct WorkerInfo {
  uint32_t rank = 0;
  StageRange layers;
  std::string state;  // absent | loading | ready | failed
  uint32_t pid = 0;
  uint32_t restarts = 0;  // supervisor restarts (local workers)
  uint64_t weight_bytes = 0;
  CacheGeometry pools;             // the pools it reported at Ready (zeros: none / self-managed)
  uint64_t pool_bytes = 0;         // ... their bytes
  uint64_t pool_budget_bytes = 0;  // ... and the memory budget they were sized against
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
  // Steps submitted before (submit()) must have been collected.
  StepOutcome step(const std::vector<SeqRequest>& seqs, const std::vector<uint64_t>& released = {});
  // Sends one step without waiting for its result, for callers that keep several steps in
  // flight (BatchEngine's decode groups and prefill chunks, the bench): stage k computes step
  // i+1 while stage k+1 computes step i, and every stage runs the steps in the order they were
  // submitted, so the outcomes equal step() called for each in turn, bit for bit. `released`
  // rides on this step's plan: the workers forget those sequences just before it. More than 4
  // in flight (the workers' ring slots) makes a stage wait for a free slot. Throws WorkerLost
  // when a worker was lost before (recover() first).
  void submit(const std::vector<SeqRequest>& seqs, const std::vector<uint64_t>& released = {});
  // The grammar masks of the step just submitted whose rows said masks_follow, now filled in
  // `seqs` (the same rows, in the same order). Must follow that submit() before any other.
  void send_masks(const std::vector<SeqRequest>& seqs);
  // Tells the last stage that the masks of the step just submitted will not come (the step
  // then fails there with `why`), so it does not wait for them.
  void abandon_masks(const std::string& why);
  // The result of the oldest submitted step not yet collected (waits for it). Throws
  // std::logic_error when none is in flight, WorkerLost or StepFailed like step(); after
  // either, every step in flight is forgotten and its sequences are in an unknown state.
  StepOutcome collect();
  // Steps submitted and not yet collected.
  size_t in_flight() const;
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
  // The pools every worker holds: EngineOptions::cache, or after start() with kFitBudget the
  // minimum the workers reported.
  const CacheGeometry& cache_geometry() const;
  const std::vector<StageRange>& layout() const;
  std::vector<WorkerInfo> workers() const;
  // May be called from any thread. What the engine loop last learned of each worker, aged by
  // the clock: a stopped (SIGSTOP) or dead worker, or an engine loop that stopped listening,
  // counts as not serving within 1.5 heartbeat periods, whether a step is in flight or not.
  WorkerPulse serving_workers() const;
  uint32_t n_vocab() const;
  uint32_t n_layer() const;
  const std::string& control_endpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds
