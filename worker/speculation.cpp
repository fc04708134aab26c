// MTP catch-up, drafting and acceptance on the last stage (see speculation.h).
#include "worker/speculation.h"

#include <algorithm>

#include "common/error.h"
#include "common/speculative.h"

namespace ds {

SpecRowOutput SpecDecoder::run(const SpecRowInput& in) {
  const auto T = static_cast<uint32_t>(in.tokens.size());
  if (in.n_draft >= T || in.u_accept.size() != in.n_draft || in.u_draft.size() < in.spec_k) {
    throw ConfigError("speculation: inconsistent drafts / random numbers for sequence " + std::to_string(in.seq_id));
  }
  SeqState& st = seqs_[in.seq_id];
  SpecRowOutput out;
  if (in.target_logits == nullptr) {  // prefill chunk without logits: only the MTP catch-up
    catch_up_and_draft(in, T, -1, &out);
    return out;
  }
  const std::vector<int32_t> drafts(in.tokens.end() - in.n_draft, in.tokens.end());
  // The coordinator may verify only a prefix of the drafts (its token budget): each draft's
  // distribution is still the one it was drawn from.
  if (in.rule.temperature > 0.0f && st.draft_dist.size() < in.n_draft) {
    throw ConfigError("speculation: sequence " + std::to_string(in.seq_id) + " verifies drafts this stage did not make");
  }
  std::vector<std::vector<double>> q;
  if (in.rule.temperature > 0.0f) q.assign(st.draft_dist.begin(), st.draft_dist.begin() + in.n_draft);
  const SpecVerdict v = accept_drafts(in.target_logits, V_, in.rule, drafts, q, in.u_accept, in.u_final);
  out.accepted = v.accepted;
  out.token = v.token;
  catch_up_and_draft(in, T - in.n_draft + v.accepted, v.token, &out);
  return out;
}

// keep_rows: the row's tokens the target keeps (positions start_pos .. start_pos+keep_rows-1).
// MTP rows for exactly those positions (re-running start_pos, which the previous step's first
// draft row already holds, costs one row and keeps the rule uniform), plus the first draft
// row (token, h at the last kept position) when drafting.
void SpecDecoder::catch_up_and_draft(const SpecRowInput& in, uint32_t keep_rows, int32_t token, SpecRowOutput* out) {
  SeqState& st = seqs_[in.seq_id];
  const bool draft = token >= 0 && in.spec_k > 0;
  std::vector<int32_t> ids(in.tokens.begin(), in.tokens.begin() + keep_rows);
  std::vector<float> h((keep_rows + 1) * D_, 0.0f);
  // h_{start-1}: known when this decoder saw the previous position; zero at position 0 or
  // after a prefix-cache hit (only the draft quality suffers, never the output).
  if (st.hidden_pos == in.start_pos && in.start_pos > 0) std::copy(st.hidden.begin(), st.hidden.end(), h.begin());
  std::copy(in.final_hidden, in.final_hidden + keep_rows * D_, h.begin() + static_cast<std::ptrdiff_t>(D_));
  st.hidden.assign(in.final_hidden + (keep_rows - 1) * D_, in.final_hidden + keep_rows * D_);
  st.hidden_pos = in.start_pos + keep_rows;
  st.draft_dist.clear();
  if (draft) ids.push_back(token);
  if (!draft) h.resize(keep_rows * D_);
  std::vector<float> logits, m;
  model_.forward_mtp(in.seq_id, in.start_pos, ids, h.data(), &logits, &m);
  uint32_t pos = in.start_pos + static_cast<uint32_t>(ids.size());
  for (uint32_t j = 0; draft && j < in.spec_k; ++j) {
    const float* row = logits.data() + (logits.size() / V_ - 1) * V_;
    std::vector<double> q = rule_distribution(row, V_, in.rule);
    const int32_t d = in.rule.temperature > 0.0f ? draw_from(q, in.u_draft[j]) : argmax_token(row, V_);
    out->drafts.push_back(d);
    out->draft_probs.push_back(static_cast<float>(q[static_cast<size_t>(d)]));
    if (in.rule.temperature > 0.0f) st.draft_dist.push_back(std::move(q));
    if (j + 1 == in.spec_k) break;
    // Chain: the next draft row is (d, m) with m this row's normed MTP output.
    const std::vector<float> m_last(m.end() - static_cast<std::ptrdiff_t>(D_), m.end());
    model_.forward_mtp(in.seq_id, pos++, {d}, m_last.data(), &logits, &m);
  }
}

}  // namespace ds
