// The plan's speculative-decoding columns on a stage (issue 10; StepPlan in step.proto): checks
// them, puts n_draft / rewind on the model's rows, and on the last stage runs the MTP half
// (worker/speculation.h) after the forward and writes its verdicts into the StepResult.
#pragma once

#include <cstdint>
#include <functional>

#include "common/ipc/protocol.h"
#include "common/sampling.h"
#include "worker/speculation.h"
#include "worker/stage_model.h"

namespace ds {

// True when some row of the plan drafts, verifies or rewinds.
bool plan_speculates(const ipc::v1::StepPlan& plan);

// True when row i of the plan drafts or verifies (n_drafts > 0 or spec_k > 0).
bool row_speculates(const ipc::v1::StepPlan& plan, int i);

// Checks the speculative columns against the rest of the plan. Throws ds::FormatError.
void validate_speculation(const ipc::v1::StepPlan& plan);

// Copies n_draft / rewind into the model rows (in.seqs parallel to the plan rows) and asks the
// last stage for the final hidden of every row (the MTP catch-up input).
void apply_speculation_columns(const ipc::v1::StepPlan& plan, StepInput* in);

// Last stage, after pack_result: runs every speculating row through `decoder` (catch-up,
// acceptance, new drafts); rewrites the result tokens of verify rows to the emitted ones and
// fills the StepResult.spec_* columns. `rule_of(seq_id)` gives the sequence's sampling rule.
void run_speculation(const ipc::v1::StepPlan& plan, const StepOutput& out, size_t n_embd, size_t n_vocab,
                     const std::function<SamplingRule(uint64_t)>& rule_of, SpecDecoder* decoder,
                     ipc::v1::StepResult* result);

}  // namespace ds
