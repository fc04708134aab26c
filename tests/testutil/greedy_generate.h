// Test helper: greedy generation on top of the pipeline engine, surviving worker crashes: after WorkerLost
// it recovers the engine and re-prefills the sequence from the tokens it holds, replaying the
// same step boundaries, so the workers' state (and every later token) is bit-identical to an
// uninterrupted run.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "coordinator/engine/engine.h"

namespace ds {

struct GreedyOptions {
  uint64_t seq_id = 1;
  uint32_t max_recoveries = 8;                         // give up (rethrow) after this many
  std::function<void(uint32_t n_generated)> on_token;  // called after each new token
  uint32_t prefill_chunk = 0;                          // prompt tokens per prefill step (0 = all in one)
  std::function<void(size_t prefilled)> on_prefill;    // called after each prefill step that leaves
                                                       // prompt tokens for later steps
  bool pipeline_prefill = false;                       // with prefill_chunk: the chunks in flight together
                                                       // (PipelineEngine::submit, min(stages + 1, 4) at once)
};

// Generates n_tokens greedily after `prompt` (prefilled in one step, or in steps of
// prefill_chunk tokens) and returns them. The sequence is dropped from the workers at the end.
std::vector<int32_t> generate_greedy(PipelineEngine& engine, const std::vector<int32_t>& prompt, uint32_t n_tokens,
                                     const GreedyOptions& options = {});

}  // namespace ds
