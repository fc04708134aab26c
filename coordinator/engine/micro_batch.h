// Micro-batching of one step across pipeline stages (issue 12): a batch of many sequences is
// cut into a few contiguous micro-batches sent back to back, so stage k works on micro-batch
// j+1 while stage k+1 works on micro-batch j. Every sequence lands in exactly one micro-batch
// and every stage runs them in order, so (with batch-independent kernels, as on CPU) the
// merged outcome equals the whole step's bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "coordinator/engine/engine.h"  // SeqRequest, StepOutcome

namespace ds {

// At most `n` contiguous, non-empty groups of `seqs` with near-equal token counts (a long
// prefill chunk may get a group of its own). Fewer groups when there are fewer sequences.
std::vector<std::vector<SeqRequest>> split_micro_batches(const std::vector<SeqRequest>& seqs, uint32_t n);

// One outcome for the whole step from the micro-batches' outcomes, in micro-batch order: rows
// and speculation verdicts concatenated (= request order), per-stage compute times summed,
// a stage's input counted as shared-memory only when all of its micro-batches' were, wall time
// the longest (they overlap).
StepOutcome merge_micro_batches(const std::vector<StepOutcome>& parts);

}  // namespace ds
