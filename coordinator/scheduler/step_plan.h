// What one scheduler step tells the workers, and what comes back. Sent once per step to
// every worker; rows are per sequence, in batch order (row r's tokens follow row r-1's).
//
// Worker order of operations for a plan:
//   1. release: forget `released` sequences (their slots may be reused in this plan);
//   2. setup: for every is_new row, reset the slot's GDN state or load `load_snapshot`;
//   3. compute every row (KV written into its blocks at start_pos..);
//   4. save: copy the slot state of rows with `save_snapshot` into that snapshot buffer.
// Loads (2) before saves (4) matter: a save may reuse the id of a snapshot that another
// row of the same plan loads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/serving/generation.h"

namespace ds {

struct ScheduledSeq {
  std::string request_id;
  uint32_t state_slot = 0;  // GDN conv + recurrent state slot of this sequence
  // First time workers see this sequence (again after a preemption): block_ids is the full
  // table and the slot starts from `load_snapshot`, or from zero state when unset.
  bool is_new = false;
  std::optional<uint32_t> load_snapshot;
  // After this step the slot holds the state at start_pos + token_ids.size(): keep a copy.
  std::optional<uint32_t> save_snapshot;
  uint32_t start_pos = 0;           // position of token_ids[0]
  std::vector<int32_t> token_ids;   // tokens to compute (prefill chunk, or one decode token + drafts)
  std::vector<uint32_t> block_ids;  // is_new: whole block table; else blocks appended since
  bool needs_logits = false;        // sample after the last row of this sequence
  // SamplingParams::prompt_logprobs while the prompt is computed: every row before the prompt's
  // last position also wants logits, for the logprob of the prompt token that follows it.
  bool prompt_rows = false;
  // Speculative decoding (SchedulerConfig::spec_k > 0): the last n_draft token_ids are drafts,
  // each verify row (the last n_draft + 1) needs logits; `rewind`: the previous step computed
  // past start_pos, roll back there; spec_k: drafts to propose after the row (on rows without
  // logits it only marks the sequence as speculating: the MTP block catches up on the chunk).
  uint32_t n_draft = 0;
  bool rewind = false;
  uint32_t spec_k = 0;
  // is_new past position 0 for a request with penalties: its tokens of [0, start_pos) (the
  // workers count them).
  std::vector<int32_t> history;
  // Vision input: the sequence's images that start before the row ends (every row of the
  // sequence sends them: the workers compute the M-RoPE positions from them).
  std::vector<ImageSpan> images;
};

struct ReleasedSeq {
  std::string request_id;
  uint32_t state_slot = 0;
};

struct StepPlan {
  uint64_t step_id = 0;
  std::vector<ReleasedSeq> released;  // finished, aborted or preempted since the last plan
  std::vector<ScheduledSeq> seqs;

  bool empty() const { return seqs.empty(); }  // nothing to run (still send `released`)
  uint32_t num_tokens() const;
  // Flat batch row index of every row that needs logits, in plan order (every verify row of
  // a row with drafts).
  std::vector<uint32_t> logits_rows() const;
};

// The sampled token of every plan row, parallel to StepPlan::seqs; entries of rows
// without needs_logits are ignored.
struct SampledStep {
  uint64_t step_id = 0;
  std::vector<int32_t> sampled;  // the token emitted after the accepted drafts on verify rows
  // Speculative decoding, parallel to `sampled` or empty: drafts of the row accepted (a prefix
  // of its n_draft) and the drafts proposed for the sequence's next step.
  std::vector<uint32_t> accepted = {};
  std::vector<std::vector<int32_t>> drafts = {};
};

struct TokenEvent {
  std::string request_id;
  int32_t token = 0;
  bool first = false;  // first generated token: the prompt is done
};

struct FinishEvent {
  std::string request_id;
  FinishReason reason = FinishReason::kStop;
  uint32_t prompt_tokens = 0;
  uint32_t generated_tokens = 0;
  uint32_t cached_tokens = 0;  // prompt tokens reused from the prefix cache (first admission)
  SpecCounts spec = {};        // speculative decoding of this request
};

struct UpdateResult {
  std::vector<TokenEvent> tokens;
  std::vector<FinishEvent> finished;
};

}  // namespace ds
