// Translation between the engine's C++ step types and the deltaserve.v1 column-wise messages.
// A sequence's sampling inputs are sent once (when it starts or they change), then omitted.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/ipc/protocol.h"
#include "coordinator/engine/engine.h"

namespace ds {

// What the last stage already knows about a sequence's sampling.
struct SentSampling {
  SamplingRule params;
  bool full_logits = false;
  LogitAdjust adjust;
};
using SentSamplingMap = std::unordered_map<uint64_t, SentSampling>;

// Builds the plan (the masks go separately: encode_step_masks); `released` sequences are forgotten (also in `sent`)
// before its rows. Records in `sent` the sampling inputs it includes. `managed`: every row must carry its placement
// (SeqRequest::cache), else none may. Throws StepFailed when the request is inconsistent (no
// tokens, random_u count != logit row count, placement missing, ...).
ipc::v1::StepPlan encode_plan(const std::vector<SeqRequest>& seqs, const std::vector<uint64_t>& released, bool managed,
                              uint64_t plan_id, uint64_t epoch, SentSamplingMap* sent);
// For workers that place sequences themselves, nothing released.
inline ipc::v1::StepPlan encode_plan(const std::vector<SeqRequest>& seqs, uint64_t plan_id, uint64_t epoch,
                                     SentSamplingMap* sent) {
  return encode_plan(seqs, {}, false, plan_id, epoch, sent);
}

// The masks of a plan's rows (SeqRequest::mask_*), each distinct one once, for the last stage.
// Throws StepFailed when a row's masks do not fit its logit rows.
ipc::v1::StepMasks encode_step_masks(const std::vector<SeqRequest>& seqs, uint64_t plan_id, uint64_t epoch);

// Unpacks a StepResult (full logits from `bulk`). Throws StepFailed when it does not answer
// `plan` consistently.
StepOutcome decode_result(const ipc::v1::StepPlan& plan, const ipc::v1::StepResult& result,
                          const std::vector<uint8_t>& bulk);

}  // namespace ds
