// deltaserve-bench --spec-k K: what MTP speculative decoding costs on one in-process stage,
// each piece relative to a plain decode step at the same context (issue 10). With these and a
// measured mean accepted length L (usage.speculative / /metrics), a speculative step emits L
// tokens for verify + MTP time, so it pays when L * decode > verify + MTP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace ds {
class StageModel;
struct ModelConfig;
}  // namespace ds

namespace ds::bench {

struct SpecCosts {
  double decode_ms = 0;     // one plain decode step: 1 token, 1 logits row
  double verify_ms = 0;     // one verify step: 1 + K tokens, K captured GDN states, 1 + K logits rows
  double mtp_row_ms = 0;    // one chained MTP draft step (1 row)
  double mtp_first_ms = 0;  // the step's first MTP call: catch-up of 1 + K kept rows + the first draft row
  // The same pieces the way a worker runs a greedy sequence (issue 10): logit rows digested on
  // the device (StepInput::digest_rows) and MTP drafts through forward_mtp_last with a digest.
  double decode_digest_ms = 0, verify_digest_ms = 0, mtp_row_digest_ms = 0, mtp_first_digest_ms = 0;
};

// Prefills `prompt` as sequence `seq_id` (self-managed stage), then times `iters` interleaved
// rounds of each piece (median of each). The context grows by a few positions per round.
// `around_verify` (optional) is called with true before and false after each greedy verify step
// (bench --profile-decode: only those steps go to the profiler).
SpecCosts measure_spec_costs(StageModel& model, const ModelConfig& cfg, const std::vector<int32_t>& prompt,
                             uint32_t spec_k, int iters, uint64_t seq_id,
                             const std::function<void(bool)>& around_verify = {});

// One table line per call (text) or one JSON object.
void print_spec_costs(const SpecCosts& c, uint32_t spec_k, size_t context, bool json);

}  // namespace ds::bench
