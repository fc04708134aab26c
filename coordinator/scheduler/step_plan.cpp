#include "coordinator/scheduler/step_plan.h"

namespace ds {

uint32_t StepPlan::num_tokens() const {
  uint32_t n = 0;
  for (const ScheduledSeq& s : seqs) n += static_cast<uint32_t>(s.token_ids.size());
  return n;
}

std::vector<uint32_t> StepPlan::logits_rows() const {
  std::vector<uint32_t> rows;
  uint32_t row = 0;
  for (const ScheduledSeq& s : seqs) {
    row += static_cast<uint32_t>(s.token_ids.size());
    if (!s.needs_logits) continue;
    for (uint32_t j = 0; j <= s.n_draft; ++j) rows.push_back(row - 1 - s.n_draft + j);
  }
  return rows;
}

}  // namespace ds
