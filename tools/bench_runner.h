// What deltaserve-bench times: a prompt prefilled in chunks of `batch` tokens, then greedy
// decode steps of one token, either on one in-process stage holding the whole model or
// through N worker processes over the real pipeline (coordinator/engine's PipelineEngine,
// ZeroMQ, no HTTP). Every call reports the tokens it fed and the forward steps it ran, so the
// report counts what was run rather than what was asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ds {
class StageModel;
struct EngineOptions;
}  // namespace ds

namespace ds::bench {

struct RunStats {
  double seconds = 0;  // wall time, submission to logits (or the sampled token) on the host
  size_t tokens = 0;   // tokens fed to the model
  size_t steps = 0;    // forward steps
  // Through worker processes: each stage's summed compute time as its worker measured it
  // (index = rank); the rest of `seconds` is transport, coordination and waiting.
  std::vector<double> stage_compute_s;
};

class BenchRunner {
 public:
  virtual ~BenchRunner() = default;
  // Prefills `ids` as sequence `seq` from position 0, `batch` tokens per step (0: all at once);
  // only the last step asks for logits.
  virtual RunStats prefill(uint64_t seq, const std::vector<int32_t>& ids, size_t batch) = 0;
  // `n` greedy one-token steps from position `start`, each fed the previous step's argmax.
  virtual RunStats decode(uint64_t seq, uint32_t start, size_t n) = 0;
  // `n` greedy steps in which every sequence of `seqs` (each cached up to `start`) advances one
  // token in ONE forward step, like the server's batched decode: tokens = seqs.size() * steps.
  virtual RunStats decode_batch(const std::vector<uint64_t>& seqs, uint32_t start, size_t n) = 0;
  virtual void drop(uint64_t seq) = 0;
};

// The in-process stage `model` (not owned; must outlive the runner). The argmax over the
// downloaded logits row is part of each decode step's time, as for a real batch-1 sampler.
std::unique_ptr<BenchRunner> make_stage_runner(StageModel& model, size_t n_vocab);

// Starts options.n_workers worker processes (PipelineEngine::start) and runs through them;
// the last stage samples greedily, so only the token comes back. Throws std::runtime_error
// when the workers do not start.
// `pipeline_depth`: prefill chunks in flight at once (0 = min(workers + 1, 4), like serve's
// --pipeline-depth; 1 = one after the other).
// `decode_groups` > 1: decode_batch splits the sequences into that many groups, each its own
// step, all in flight at once; a group's next step goes out as soon as its result is in (the
// server's --decode-groups). A "step" of the stats is then one round over the groups.
std::unique_ptr<BenchRunner> make_pipeline_runner(const EngineOptions& options, uint32_t pipeline_depth = 0,
                                                  uint32_t decode_groups = 1);

}  // namespace ds::bench
