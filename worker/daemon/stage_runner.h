// Executes StepPlans on one StageModel: checks the plan, applies its releases, turns its
// columns (tokens, and the scheduler's memory placement when managed) into the model's
// StepInput, runs the forward and packs the output for the next hop — a StageForward (hidden
// chunk) for the next stage, or a StepResult (logit digests) for the coordinator on the last
// stage. Holds the sampling inputs of each sequence (sent once by the coordinator).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/ipc/protocol.h"  // v1 messages
#include "common/logit_adjust.h"
#include "common/sampling.h"  // SamplingRule, digest_logits
#include "common/stage_types.h"
#include "worker/daemon/stage_handoff.h"  // StageHandoff, HostRows
#include "worker/speculation.h"           // SpecDecoder (last stage, speculating plans)
#include "worker/stage_model.h"           // StageModel, StepInput, StepOutput

namespace ds {

struct StageShape {
  uint32_t rank = 0;
  uint32_t n_embd = 0;   // hidden size (validates incoming chunks)
  uint32_t n_vocab = 0;  // validates token ids on stage 0
  // Last stage: what its rows return (a pooling head returns StepResult.pooled, never samples).
  OutputHead head = OutputHead::kLanguageModel;
};

// What one step produced: the envelope to send on and its bulk bytes.
struct StageOutputMessage {
  ipc::v1::Envelope env;         // stage_forward (to the next stage) or step_result (to the coordinator)
  std::vector<uint8_t> bulk;     // hidden chunk or full logits (empty when the hidden chunk went to
  bool hidden_in_place = false;  // ... the caller's HiddenBuffer: then this is true)
  bool hidden_deferred = false;  // in place, and still landing: the destination's ready signal says when
};

// Non-last stage: where the output hidden chunk may go directly (e.g. the next stage's ring slot,
// HiddenSender::reserve). Called with the chunk's size in bytes; returns a float-aligned buffer of
// that size, or an empty span to fall back to StageOutputMessage::bulk. With `ready` the rows may
// land after run() returns (StageOutputMessage::hidden_deferred): the model sets it once they do.
struct HiddenDestination {
  std::span<uint8_t> bytes;
  HostSignal ready;
};
using HiddenBuffer = std::function<HiddenDestination(size_t nbytes)>;

// Last stage: the StepMasks of a plan sent with masks_follow (waits for it; throws when it does
// not come in time or was abandoned).
using MaskFetch = std::function<ipc::v1::StepMasks(const ipc::v1::StepPlan& plan)>;

class StageRunner {
 public:
  StageRunner(std::unique_ptr<StageModel> model, StageShape shape);

  // Runs `plan` with the previous stage's hidden states (`hidden_bytes` empty on stage 0; read
  // in place when float-aligned, e.g. a shared-memory ring slot, so they must stay valid until
  // run() returns).
  // `hidden_ready`, when set: the bytes may still be landing (HiddenReceiver::landing).
  // `timings` are the earlier stages' timings. `fetch_masks` (last stage, plans with
  // masks_follow) brings the plan's grammar masks, called once the step's layers are queued.
  // Throws ds::FormatError when the plan, the chunk or the masks are inconsistent, or whatever
  // the model throws on invalid input.
  StageOutputMessage run(const ipc::v1::StepPlan& plan, std::span<const uint8_t> hidden_bytes,
                         const google::protobuf::RepeatedPtrField<ipc::v1::StageTiming>& timings,
                         const HiddenBuffer& hidden_out = {}, HostSignal hidden_ready = {},
                         const MaskFetch& fetch_masks = {});

  // A landing input is waited for by this host, not queued behind a device-side wait.
  void wait_for_landing_on_host(bool on_host) { ready_on_host_ = on_host; }

  void drop(const ipc::v1::DropSequences& drop);
  size_t n_sequences() const { return live_.size(); }

 private:
  struct SeqSampling {
    SamplingRule params;
    bool full_logits = false;
    LogitAdjust adjust;
    std::optional<TokenHistory> history;  // with penalties: the sequence's tokens by position
  };
  void remember_sampling(const ipc::v1::StepPlan& plan);
  const SeqSampling& sampling_of(uint64_t seq_id) const;
  void forget(uint64_t seq_id);  // model state, sampling inputs, bookkeeping
  StepInput build_input(const ipc::v1::StepPlan& plan) const;
  // Where this step's hidden rows come from and go to (checks the chunk's size).
  HostRows host_rows(const ipc::v1::StepPlan& plan, std::span<const uint8_t> hidden_bytes,
                     std::vector<float>* hidden_storage, const HiddenBuffer& hidden_out, HostSignal hidden_ready) const;
  std::vector<DigestRequest> digest_requests(const ipc::v1::StepPlan& plan) const;
  std::vector<LogitEdit> logit_edits(const ipc::v1::StepPlan& plan);  // advances the histories
  TokenMasks token_masks(const ipc::v1::StepPlan& plan, const ipc::v1::StepMasks& masks) const;
  void pack_pooled(const ipc::v1::StepPlan& plan, const StepOutput& out, ipc::v1::StepResult* result) const;
  void pack_result(const ipc::v1::StepPlan& plan, const StepOutput& out, ipc::v1::StepResult* result,
                   std::vector<uint8_t>* bulk) const;

  std::unique_ptr<StageModel> model_;
  StageShape shape_;
  std::unordered_map<uint64_t, SeqSampling> sampling_;  // last stage only
  std::unordered_map<uint64_t, uint32_t> live_;         // seq id -> positions held
  StageHandoff handoff_;                                // after shape_: built from its n_embd
  bool ready_on_host_ = false;
  std::unique_ptr<SpecDecoder> spec_;  // last stage, created by the first speculating plan
};

// Checks the column arrays of a plan against each other and the ids against the vocabulary:
// `n_vocab` the input ids (first stage), `head_vocab` the forced ids (0: unchecked). Throws
// ds::FormatError.
void validate_plan(const ipc::v1::StepPlan& plan, uint32_t n_vocab, uint32_t head_vocab);

}  // namespace ds
