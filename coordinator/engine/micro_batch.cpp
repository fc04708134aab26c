// Micro-batch split and merge (see micro_batch.h).
#include "coordinator/engine/micro_batch.h"

#include <algorithm>

namespace ds {

std::vector<std::vector<SeqRequest>> split_micro_batches(const std::vector<SeqRequest>& seqs, uint32_t n) {
  std::vector<std::vector<SeqRequest>> groups;
  if (seqs.empty()) return groups;
  const size_t n_groups = std::clamp<size_t>(n, 1, seqs.size());
  uint64_t total = 0;
  for (const SeqRequest& s : seqs) total += s.tokens.size();
  groups.emplace_back();
  uint64_t done = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    // Close the current group once it reaches its share of the tokens, keeping at least one
    // sequence for every group still to come.
    const size_t left = seqs.size() - i;
    const size_t groups_to_open = n_groups - groups.size();
    const bool share_reached = done * n_groups >= total * groups.size();
    if (!groups.back().empty() && groups_to_open > 0 && (share_reached || left == groups_to_open)) groups.emplace_back();
    groups.back().push_back(seqs[i]);
    done += seqs[i].tokens.size();
  }
  return groups;
}

StepOutcome merge_micro_batches(const std::vector<StepOutcome>& parts) {
  StepOutcome out;
  out.n_plans = static_cast<uint32_t>(parts.size());
  for (const StepOutcome& p : parts) {
    out.rows.insert(out.rows.end(), p.rows.begin(), p.rows.end());
    out.spec.insert(out.spec.end(), p.spec.begin(), p.spec.end());
    out.wall_us = std::max(out.wall_us, p.wall_us);
    for (size_t s = 0; s < p.timings.size(); ++s) {
      if (s == out.timings.size()) {
        out.timings.push_back(p.timings[s]);
        continue;
      }
      out.timings[s].compute_us += p.timings[s].compute_us;
      out.timings[s].input_from_shm = out.timings[s].input_from_shm && p.timings[s].input_from_shm;
    }
  }
  return out;
}

}  // namespace ds
