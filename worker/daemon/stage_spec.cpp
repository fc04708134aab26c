// Speculative columns of a plan on a stage (see stage_spec.h).
#include "worker/daemon/stage_spec.h"

#include <string>

#include "common/error.h"

namespace ds {
namespace v1 = ipc::v1;
namespace {

// A generous bound on drafts per step: the rollback holds StatePool::kMaxCaptures states, the
// model rejects more; this only stops absurd random-number counts early.
constexpr uint32_t kMaxSpecK = 16;

// A speculating row with logits asks them for exactly its last n_drafts + 1 rows.
void check_row(const v1::StepPlan& plan, int i, int first_logit_row) {
  const std::string who = "plan " + std::to_string(plan.plan_id()) + ": sequence " + std::to_string(plan.seq_ids(i));
  const uint32_t n_draft = plan.n_drafts(i), n_logits = plan.n_logit_rows(i), n_tokens = plan.n_tokens(i);
  if (n_draft >= n_tokens) throw FormatError(who + ": more drafts than its row has tokens after the first");
  if (plan.spec_k(i) > kMaxSpecK) throw FormatError(who + ": spec_k above " + std::to_string(kMaxSpecK));
  if (n_draft > 0 && n_logits != n_draft + 1)
    throw FormatError(who + ": a row with drafts needs logits on each verify row");
  const bool logits = row_speculates(plan, i) && n_logits > 0;
  for (uint32_t j = 0; logits && j < n_logits; ++j) {
    if (plan.logit_rows(first_logit_row + static_cast<int>(j)) != n_tokens - n_logits + j) {
      throw FormatError(who + ": a speculating row's logit rows must be its last ones");
    }
  }
  const uint32_t want = logits ? n_draft + plan.spec_k(i) : 0;
  if (plan.n_spec_random_u(i) != want) {
    throw FormatError(who + ": " + std::to_string(plan.n_spec_random_u(i)) + " speculative random numbers, expected " +
                      std::to_string(want));
  }
}

}  // namespace

bool plan_speculates(const v1::StepPlan& plan) {
  return plan.n_drafts_size() != 0;
}

bool row_speculates(const v1::StepPlan& plan, int i) {
  return plan.n_drafts_size() != 0 && (plan.n_drafts(i) > 0 || plan.spec_k(i) > 0);
}

void validate_speculation(const v1::StepPlan& plan) {
  const int n = plan.seq_ids_size();
  if (!plan_speculates(plan)) {
    if (plan.rewinds_size() || plan.spec_k_size() || plan.n_spec_random_u_size() || plan.spec_random_u_size()) {
      throw FormatError("plan " + std::to_string(plan.plan_id()) + ": speculative columns without n_drafts");
    }
    return;
  }
  if (plan.n_drafts_size() != n || plan.rewinds_size() != n || plan.spec_k_size() != n ||
      plan.n_spec_random_u_size() != n) {
    throw FormatError("plan " + std::to_string(plan.plan_id()) + ": speculative arrays differ in length");
  }
  int logit_row = 0;
  uint64_t numbers = 0;
  for (int i = 0; i < n; ++i) {
    check_row(plan, i, logit_row);
    logit_row += static_cast<int>(plan.n_logit_rows(i));
    numbers += plan.n_spec_random_u(i);
  }
  if (numbers != static_cast<uint64_t>(plan.spec_random_u_size())) {
    throw FormatError("plan: spec_random_u length != sum of n_spec_random_u");
  }
}

void apply_speculation_columns(const v1::StepPlan& plan, StepInput* in) {
  if (!plan_speculates(plan)) return;
  for (int i = 0; i < plan.seq_ids_size(); ++i) {
    SeqStep& s = in->seqs[static_cast<size_t>(i)];
    s.n_draft = plan.n_drafts(i);
    s.rewind = plan.rewinds(i);
    if (row_speculates(plan, i)) in->all_final_hidden = true;
  }
}

void run_speculation(const v1::StepPlan& plan, const StepOutput& out, size_t n_embd, size_t n_vocab,
                     const std::function<SamplingRule(uint64_t)>& rule_of, SpecDecoder* decoder,
                     v1::StepResult* result) {
  if (!plan_speculates(plan)) return;
  size_t token = 0;
  int logit_row = 0, u = 0;
  for (int i = 0; i < plan.seq_ids_size(); ++i) {
    const uint32_t n_tokens = plan.n_tokens(i), n_logits = plan.n_logit_rows(i);
    if (row_speculates(plan, i)) {
      SpecRowInput r;
      r.seq_id = plan.seq_ids(i);
      r.start_pos = plan.start_positions(i);
      r.tokens.assign(plan.token_ids().begin() + static_cast<int>(token),
                      plan.token_ids().begin() + static_cast<int>(token + n_tokens));
      r.n_draft = plan.n_drafts(i);
      r.final_hidden = out.final_hidden.data() + token * n_embd;
      r.rule = rule_of(r.seq_id);
      if (n_logits > 0) {
        // Digested on the device (greedy rows only, StageRunner::digest_requests) or full logits.
        if (out.digests.empty())
          r.target_logits = out.logits.data() + static_cast<size_t>(logit_row) * n_vocab;
        else
          r.target_digests = out.digests.data() + logit_row;
        r.spec_k = plan.spec_k(i);
        const auto first = plan.spec_random_u().begin() + u;
        r.u_accept.assign(first, first + r.n_draft);
        r.u_draft.assign(first + r.n_draft, first + r.n_draft + r.spec_k);
        r.u_final = plan.random_u(logit_row + static_cast<int>(n_logits) - 1);
      }
      const SpecRowOutput o = decoder->run(r);
      if (n_logits > 0) {
        // The emitted tokens replace the digests' own picks on rows 0..accepted.
        for (uint32_t j = 0; j <= o.accepted; ++j) {
          const int row = logit_row + static_cast<int>(j);
          const int32_t t = j < o.accepted ? r.tokens[n_tokens - r.n_draft + j] : o.token;
          if (r.target_logits == nullptr) {
            // Greedy on digests: every emitted token is its row's argmax, the digest's own pick.
            if (t != result->tokens(row)) throw FormatError("speculation: a greedy verdict differs from its digest");
            continue;
          }
          result->set_tokens(row, t);
          result->set_token_logprobs(
              row, static_cast<float>(r.target_logits[j * n_vocab + static_cast<size_t>(t)] - result->logsumexp(row)));
        }
        result->add_spec_seq_ids(r.seq_id);
        result->add_spec_accepted(o.accepted);
        result->add_spec_n_drafts(static_cast<uint32_t>(o.drafts.size()));
        result->mutable_spec_drafts()->Add(o.drafts.begin(), o.drafts.end());
      }
    }
    token += n_tokens;
    logit_row += static_cast<int>(n_logits);
    u += static_cast<int>(plan.n_spec_random_u(i));
  }
}

}  // namespace ds
