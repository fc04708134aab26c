// The last stage's half of MTP speculative decoding (spec §7; issue 10). After the main
// forward of a step, for every speculating sequence: apply the acceptance rule to its verify
// rows (common/speculative.h, with the coordinator's random numbers), run the MTP block over
// the accepted positions (catch-up: row p = (token x_p, target hidden h_{p-1}), so the MTP KV
// holds every position the target holds, prompt included), then chain `spec_k` drafts, each
// MTP step fed the previous step's shared-head-normed output. GDN rollback of the main stack
// is not done here: the next plan names it (SeqStep::rewind) so every stage applies it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/sampling.h"
#include "worker/stage_model.h"

namespace ds {

// One speculating sequence of a finished forward (rows as in its SeqStep).
struct SpecRowInput {
  uint64_t seq_id = 0;
  uint32_t start_pos = 0;
  std::vector<int32_t> tokens;  // the row's tokens; the last n_draft are drafts
  uint32_t n_draft = 0;
  const float* target_logits = nullptr;  // n_draft + 1 rows for the last rows; nullptr: no logits
                                         // (an intermediate prefill chunk: catch-up only)
  // Greedy rules only, instead of target_logits: the device digests of those n_draft + 1 rows
  // (a greedy verdict needs only each row's argmax, LogitDigest::token).
  const LogitDigest* target_digests = nullptr;
  const float* final_hidden = nullptr;  // [tokens.size(), n_embd], final-normed
  uint32_t spec_k = 0;                  // drafts to produce (only with target_logits)
  SamplingRule rule;
  std::vector<double> u_accept;  // n_draft
  double u_final = 0.0;
  std::vector<double> u_draft;  // spec_k
  bool has_target() const { return target_logits != nullptr || target_digests != nullptr; }
};

struct SpecRowOutput {
  uint32_t accepted = 0;
  int32_t token = -1;              // emitted after the accepted drafts (-1 without logits)
  std::vector<int32_t> drafts;     // for the next step
  std::vector<float> draft_probs;  // q(draft) under the rule (1 when greedy)
};

class SpecDecoder {
 public:
  SpecDecoder(StageModel& model, size_t n_embd, size_t n_vocab) : model_(model), D_(n_embd), V_(n_vocab) {}
  SpecRowOutput run(const SpecRowInput& in);
  void forget(uint64_t seq_id) { seqs_.erase(seq_id); }
  void forget_all() { seqs_.clear(); }

 private:
  struct SeqState {
    uint32_t hidden_pos = 0;                      // positions before h: h is the target hidden at hidden_pos - 1
    std::vector<float> hidden;                    // [n_embd]
    std::vector<std::vector<double>> draft_dist;  // temperature > 0: q of the pending drafts
  };
  void catch_up_and_draft(const SpecRowInput& in, uint32_t keep_rows, int32_t token, SpecRowOutput* out);
  // One MTP step's draft: the greedy pick from the device digest when the backend gives one,
  // else from the last row's logits under the rule (q kept for the rejection rule).
  int32_t mtp_draft(const SpecRowInput& in, uint32_t start_pos, const std::vector<int32_t>& ids, const float* h,
                    uint32_t j, SpecRowOutput* out, std::vector<float>* m);

  StageModel& model_;
  size_t D_, V_;
  std::unordered_map<uint64_t, SeqState> seqs_;
};

}  // namespace ds
