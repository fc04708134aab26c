// Step message codec (see step_codec.h).
#include "coordinator/engine/step_codec.h"

#include <cstring>

namespace ds {
namespace v1 = ipc::v1;
namespace {

bool same_sampling(const SentSampling& a, const SeqRequest& s) {
  return a.params.temperature == s.sampling.temperature && a.params.top_k == s.sampling.top_k &&
         a.params.top_p == s.sampling.top_p && a.full_logits == s.return_full_logits;
}

void check_request(const SeqRequest& s, bool managed) {
  if (s.cache.has_value() != managed) {
    throw StepFailed("sequence " + std::to_string(s.seq_id) +
                     (managed ? ": the workers' memory is managed, the step must place it"
                              : ": placed on workers that place sequences themselves"));
  }
  if (s.tokens.empty()) throw StepFailed("sequence " + std::to_string(s.seq_id) + " has no tokens");
  if (!s.random_u.empty() && s.random_u.size() != s.logit_rows.size()) {
    throw StepFailed("sequence " + std::to_string(s.seq_id) + ": random_u count differs from logit_rows count");
  }
  for (uint32_t r : s.logit_rows) {
    if (r >= s.tokens.size()) throw StepFailed("sequence " + std::to_string(s.seq_id) + ": logit row out of range");
  }
}

// The placement columns of one row (see StepPlan in step.proto).
void encode_placement(const SeqCache& c, v1::StepPlan* plan) {
  plan->add_state_slots(c.state_slot);
  plan->add_is_new(c.is_new);
  plan->add_load_snapshots(c.load_snapshot ? static_cast<int32_t>(*c.load_snapshot) : -1);
  plan->add_save_snapshots(c.save_snapshot ? static_cast<int32_t>(*c.save_snapshot) : -1);
  plan->add_n_block_ids(static_cast<uint32_t>(c.block_ids.size()));
  plan->mutable_block_ids()->Add(c.block_ids.begin(), c.block_ids.end());
}

}  // namespace

v1::StepPlan encode_plan(const std::vector<SeqRequest>& seqs, const std::vector<uint64_t>& released, bool managed,
                         uint64_t plan_id, uint64_t epoch, SentSamplingMap* sent) {
  if (seqs.empty()) throw StepFailed("empty step");
  v1::StepPlan plan;
  plan.set_plan_id(plan_id);
  plan.set_epoch(epoch);
  plan.set_managed_memory(managed);
  plan.mutable_released_seq_ids()->Add(released.begin(), released.end());
  for (uint64_t id : released) sent->erase(id);  // the last stage forgets them too
  for (const SeqRequest& s : seqs) {
    check_request(s, managed);
    if (s.cache) encode_placement(*s.cache, &plan);
    plan.add_seq_ids(s.seq_id);
    plan.add_start_positions(s.start_pos);
    plan.add_n_tokens(static_cast<uint32_t>(s.tokens.size()));
    plan.mutable_token_ids()->Add(s.tokens.begin(), s.tokens.end());
    plan.add_n_logit_rows(static_cast<uint32_t>(s.logit_rows.size()));
    plan.mutable_logit_rows()->Add(s.logit_rows.begin(), s.logit_rows.end());
    for (size_t i = 0; i < s.logit_rows.size(); ++i) plan.add_random_u(s.random_u.empty() ? 0.0 : s.random_u[i]);
    const auto it = sent->find(s.seq_id);
    // Sent in full when the sequence (re)starts or its inputs change; omitted otherwise.
    const bool restarts = s.start_pos == 0 || (s.cache && s.cache->is_new);
    if (restarts || it == sent->end() || !same_sampling(it->second, s)) {
      v1::SequenceSampling* entry = plan.add_sampling();
      entry->set_seq_id(s.seq_id);
      entry->mutable_params()->set_temperature(s.sampling.temperature);
      entry->mutable_params()->set_top_k(s.sampling.top_k);
      entry->mutable_params()->set_top_p(s.sampling.top_p);
      entry->mutable_params()->set_return_full_logits(s.return_full_logits);
      (*sent)[s.seq_id] = SentSampling{s.sampling, s.return_full_logits};
    }
  }
  return plan;
}

StepOutcome decode_result(const v1::StepPlan& plan, const v1::StepResult& result, const std::vector<uint8_t>& bulk) {
  const int n_rows = plan.logit_rows_size();
  const uint32_t k = result.top_k();
  if (result.seq_ids_size() != n_rows || result.rows_size() != n_rows || result.tokens_size() != n_rows ||
      result.logsumexp_size() != n_rows || result.top_ids_size() != static_cast<int>(k) * n_rows ||
      result.top_logprobs_size() != result.top_ids_size()) {
    throw StepFailed("step result of plan " + std::to_string(plan.plan_id()) + " has inconsistent columns");
  }
  const uint64_t n_vocab = result.n_vocab();
  const uint64_t n_full = static_cast<uint64_t>(result.full_logit_rows_size());
  if (bulk.size() != n_full * n_vocab * sizeof(float)) throw StepFailed("step result: full logits size mismatch");
  StepOutcome out;
  out.rows.resize(static_cast<size_t>(n_rows));
  for (int i = 0; i < n_rows; ++i) {
    RowResult& r = out.rows[static_cast<size_t>(i)];
    r.seq_id = result.seq_ids(i);
    r.row = result.rows(i);
    r.token = result.tokens(i);
    r.logsumexp = result.logsumexp(i);
    r.token_logprob = result.token_logprobs_size() == n_rows ? result.token_logprobs(i) : 0.0f;
    const auto first = static_cast<int>(k) * i;
    r.top_ids.assign(result.top_ids().begin() + first, result.top_ids().begin() + first + static_cast<int>(k));
    r.top_logprobs.assign(result.top_logprobs().begin() + first, result.top_logprobs().begin() + first + static_cast<int>(k));
  }
  for (uint64_t f = 0; f < n_full; ++f) {
    const uint32_t row = result.full_logit_rows(static_cast<int>(f));
    if (row >= static_cast<uint32_t>(n_rows)) throw StepFailed("step result: full logits for an unknown row");
    std::vector<float>& dst = out.rows[row].logits;
    dst.resize(n_vocab);
    std::memcpy(dst.data(), bulk.data() + f * n_vocab * sizeof(float), n_vocab * sizeof(float));
  }
  for (const v1::StageTiming& t : result.timings()) out.timings.push_back(StageTime{t.rank(), t.compute_us()});
  return out;
}

}  // namespace ds
