// MTP catch-up, drafting and acceptance on the last stage (see speculation.h).
#include "worker/speculation.h"

#include <algorithm>

#include "common/error.h"
#include "common/speculative.h"

namespace ds {
namespace {

bool is_greedy(const SamplingRule& rule) {
  return !(rule.temperature > 0.0f);
}

// accept_drafts' greedy rule on digests: draft j stands while it is row j's argmax.
SpecVerdict greedy_verdict(const LogitDigest* rows, const std::vector<int32_t>& drafts) {
  uint32_t j = 0;
  while (j < drafts.size() && rows[j].token == drafts[j]) ++j;
  return {j, rows[j].token};
}

}  // namespace

SpecRowOutput SpecDecoder::run(const SpecRowInput& in) {
  const auto T = static_cast<uint32_t>(in.tokens.size());
  if (in.n_draft >= T || in.u_accept.size() != in.n_draft || in.u_draft.size() < in.spec_k) {
    throw ConfigError("speculation: inconsistent drafts / random numbers for sequence " + std::to_string(in.seq_id));
  }
  SeqState& st = seqs_[in.seq_id];
  SpecRowOutput out;
  if (in.target_digests != nullptr && !is_greedy(in.rule)) {
    throw ConfigError("speculation: sequence " + std::to_string(in.seq_id) +
                      " samples (temperature > 0) but has only digests");
  }
  if (!in.has_target()) {  // prefill chunk without logits: only the MTP catch-up
    catch_up_and_draft(in, T, -1, &out);
    return out;
  }
  const std::vector<int32_t> drafts(in.tokens.end() - in.n_draft, in.tokens.end());
  // The coordinator may verify only a prefix of the drafts (its token budget): each draft's
  // distribution is still the one it was drawn from.
  if (in.rule.temperature > 0.0f && st.draft_dist.size() < in.n_draft) {
    throw ConfigError("speculation: sequence " + std::to_string(in.seq_id) +
                      " verifies drafts this stage did not make");
  }
  std::vector<std::vector<double>> q;
  if (in.rule.temperature > 0.0f) q.assign(st.draft_dist.begin(), st.draft_dist.begin() + in.n_draft);
  const SpecVerdict v = in.target_logits != nullptr
                            ? accept_drafts(in.target_logits, V_, in.rule, drafts, q, in.u_accept, in.u_final)
                            : greedy_verdict(in.target_digests, drafts);
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
  std::vector<float> m;
  if (!draft) {  // catch-up only: nothing reads the head; a greedy digest keeps its logits on the device
    const DigestRequest nothing_read{};
    LogitDigest unused;
    std::vector<float> logits;
    model_.forward_mtp_last(in.seq_id, in.start_pos, ids, h.data(), &nothing_read, &unused, &logits, &m);
    return;
  }
  uint32_t pos = in.start_pos + static_cast<uint32_t>(ids.size());
  int32_t d = mtp_draft(in, in.start_pos, ids, h.data(), 0, out, &m);
  for (uint32_t j = 1; j < in.spec_k; ++j) {
    // Chain: the next draft row is (d, m) with m the previous row's normed MTP output.
    const std::vector<float> m_prev = m;
    d = mtp_draft(in, pos++, {d}, m_prev.data(), j, out, &m);
  }
}

int32_t SpecDecoder::mtp_draft(const SpecRowInput& in, uint32_t start_pos, const std::vector<int32_t>& ids,
                               const float* h, uint32_t j, SpecRowOutput* out, std::vector<float>* m) {
  const bool greedy = is_greedy(in.rule);
  const DigestRequest request{in.rule, in.u_draft[j]};
  LogitDigest digest;
  std::vector<float> logits;
  if (model_.forward_mtp_last(in.seq_id, start_pos, ids, h, greedy ? &request : nullptr, &digest, &logits, m)) {
    out->drafts.push_back(digest.token);  // greedy: q is one-hot at the argmax
    out->draft_probs.push_back(1.0f);
    return digest.token;
  }
  // A draft vocabulary (StageOptions::draft_vocab) gives the first ids' logits only: q is 0 on
  // the rest, which the rejection rule handles like any other q.
  const size_t n = logits.size();
  if (n == 0 || n > V_ || m->size() != D_) throw ConfigError("speculation: MTP step returned a malformed last row");
  if (greedy) {  // the one-hot q needs no dense copy
    const int32_t d = argmax_token(logits.data(), n);
    out->drafts.push_back(d);
    out->draft_probs.push_back(1.0f);
    return d;
  }
  std::vector<double> q = rule_distribution(logits.data(), n, in.rule);
  q.resize(V_, 0.0);
  const int32_t d = draw_from(q, in.u_draft[j]);
  out->drafts.push_back(d);
  out->draft_probs.push_back(static_cast<float>(q[static_cast<size_t>(d)]));
  seqs_[in.seq_id].draft_dist.push_back(std::move(q));
  return d;
}

}  // namespace ds
