// Step message codec (see step_codec.h).
#include "coordinator/engine/step_codec.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/image_span.h"
#include "common/token_mask.h"

namespace ds {
namespace v1 = ipc::v1;
namespace {

bool same_sampling(const SentSampling& a, const SeqRequest& s) {
  return a.params.temperature == s.sampling.temperature && a.params.top_k == s.sampling.top_k &&
         a.params.top_p == s.sampling.top_p && a.params.min_p == s.sampling.min_p && a.adjust == s.adjust &&
         a.full_logits == s.return_full_logits;
}

// A verify row asks logits for exactly its last n_draft + 1 rows; random numbers are given for
// every draft to accept and every draft to propose.
void check_speculation(const SeqRequest& s) {
  const std::string who = "sequence " + std::to_string(s.seq_id);
  if (s.n_draft >= s.tokens.size())
    throw StepFailed(who + ": " + std::to_string(s.n_draft) + " drafts in a row of " + std::to_string(s.tokens.size()) +
                     " tokens");
  if (s.n_draft > 0 && s.logit_rows.size() != s.n_draft + 1) {
    throw StepFailed(who + ": a row with drafts needs logits for each verify row");
  }
  for (size_t j = 0; s.n_draft > 0 && j < s.logit_rows.size(); ++j) {
    if (s.logit_rows[j] != s.tokens.size() - 1 - s.n_draft + j) throw StepFailed(who + ": verify rows out of order");
  }
  const size_t want = s.speculates() && !s.logit_rows.empty() ? s.n_draft + s.spec_k : 0;
  if (s.spec_random_u.size() != want) {
    throw StepFailed(who + ": " + std::to_string(s.spec_random_u.size()) + " speculative random numbers, expected " +
                     std::to_string(want));
  }
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
  if (!s.forced_tokens.empty() && (s.forced_tokens.size() != s.logit_rows.size() || s.speculates())) {
    throw StepFailed("sequence " + std::to_string(s.seq_id) + ": forced tokens need one per logit row, no speculation");
  }
  check_speculation(s);
}

void check_masks(const SeqRequest& s) {
  if (s.mask_bits.size() != s.mask_rows.size() * s.mask_words || (!s.mask_rows.empty() && s.mask_words == 0)) {
    throw StepFailed("sequence " + std::to_string(s.seq_id) + ": mask_bits do not fit mask_rows x mask_words");
  }
  for (size_t i = 0; i < s.mask_rows.size(); ++i) {
    if (s.mask_rows[i] >= s.logit_rows.size() || (i > 0 && s.mask_rows[i] <= s.mask_rows[i - 1])) {
      throw StepFailed("sequence " + std::to_string(s.seq_id) + ": mask rows must be increasing logit rows");
    }
  }
}

// The grammar masks of one sequence, whose logit rows start at flat index `first_row`.
void add_masks(const SeqRequest& s, uint32_t first_row, std::optional<MaskPacker>& packer) {
  check_masks(s);
  if (s.mask_rows.empty()) return;
  if (!packer) packer.emplace(s.mask_words);
  if (packer->n_words() != s.mask_words) {
    throw StepFailed("sequence " + std::to_string(s.seq_id) + ": masks of another width in one plan");
  }
  for (size_t i = 0; i < s.mask_rows.size(); ++i) {
    packer->add(first_row + s.mask_rows[i], s.mask_bits.data() + i * s.mask_words);
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

void encode_speculation(const SeqRequest& s, v1::StepPlan* plan) {
  plan->add_n_drafts(s.n_draft);
  plan->add_rewinds(s.rewind);
  plan->add_spec_k(s.spec_k);
  plan->add_n_spec_random_u(static_cast<uint32_t>(s.spec_random_u.size()));
  plan->mutable_spec_random_u()->Add(s.spec_random_u.begin(), s.spec_random_u.end());
}

// The speculative columns of a result: one entry per speculating plan row with logits.
void decode_speculation(const v1::StepPlan& plan, const v1::StepResult& result, StepOutcome* out) {
  const int n = result.spec_seq_ids_size();
  if (result.spec_accepted_size() != n || result.spec_n_drafts_size() != n) {
    throw StepFailed("step result of plan " + std::to_string(plan.plan_id()) + " has inconsistent speculative columns");
  }
  std::unordered_map<uint64_t, uint32_t> drafts_of;  // plan rows with logits: drafts verified
  for (int i = 0; i < plan.seq_ids_size(); ++i) {
    if (plan.n_logit_rows(i) > 0) drafts_of[plan.seq_ids(i)] = plan.n_drafts_size() ? plan.n_drafts(i) : 0;
  }
  int next = 0;
  for (int i = 0; i < n; ++i) {
    SpecResult r;
    r.seq_id = result.spec_seq_ids(i);
    r.accepted = result.spec_accepted(i);
    const auto it = drafts_of.find(r.seq_id);
    if (it == drafts_of.end() || r.accepted > it->second) {
      throw StepFailed("step result: speculative verdict for sequence " + std::to_string(r.seq_id) +
                       " does not fit the plan");
    }
    const int k = static_cast<int>(result.spec_n_drafts(i));
    if (next + k > result.spec_drafts_size()) throw StepFailed("step result: spec_drafts too short");
    r.drafts.assign(result.spec_drafts().begin() + next, result.spec_drafts().begin() + next + k);
    next += k;
    out->spec.push_back(std::move(r));
  }
  if (next != result.spec_drafts_size()) throw StepFailed("step result: spec_drafts too long");
}

// The image columns of one row: its spans (all rows' when any row has images), and the pixels it
// brings that the plan does not hold yet (`pixels_sent`: hashes already in it).
void encode_images(const SeqRequest& s, bool any_images, std::unordered_set<uint64_t>* pixels_sent,
                   v1::StepPlan* plan) {
  if (!any_images) return;
  if (const char* problem = image_spans_problem(s.images)) {
    throw StepFailed("sequence " + std::to_string(s.seq_id) + ": " + problem);
  }
  plan->add_n_images(static_cast<uint32_t>(s.images.size()));
  for (const ImageSpan& im : s.images) {
    plan->add_image_first_pos(im.first_pos);
    plan->add_image_grid_h(im.grid_h);
    plan->add_image_grid_w(im.grid_w);
    plan->add_image_hashes(im.hash);
  }
  for (const ImagePixelsRef& p : s.image_pixels) {
    if (!p.image) throw StepFailed("sequence " + std::to_string(s.seq_id) + ": image pixels missing");
    if (!pixels_sent->insert(p.hash).second) continue;
    v1::ImagePixels* out = plan->add_image_pixels();
    out->set_hash(p.hash);
    out->set_width(p.image->width);
    out->set_height(p.image->height);
    out->set_rgb(reinterpret_cast<const char*>(p.image->rgb.data()), p.image->rgb.size());
  }
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
  const bool speculative =
      std::any_of(seqs.begin(), seqs.end(), [](const SeqRequest& s) { return s.speculates() || s.rewind; });
  const bool forces =
      std::any_of(seqs.begin(), seqs.end(), [](const SeqRequest& s) { return !s.forced_tokens.empty(); });
  const bool images = std::any_of(seqs.begin(), seqs.end(), [](const SeqRequest& s) { return !s.images.empty(); });
  std::unordered_set<uint64_t> pixels_sent;
  for (const SeqRequest& s : seqs) {
    check_request(s, managed);
    if (s.masks_follow || !s.mask_rows.empty()) plan.set_masks_follow(true);
    if (speculative) encode_speculation(s, &plan);
    encode_images(s, images, &pixels_sent, &plan);
    if (s.cache) encode_placement(*s.cache, &plan);
    plan.add_seq_ids(s.seq_id);
    plan.add_start_positions(s.start_pos);
    plan.add_n_tokens(static_cast<uint32_t>(s.tokens.size()));
    plan.mutable_token_ids()->Add(s.tokens.begin(), s.tokens.end());
    plan.add_n_logit_rows(static_cast<uint32_t>(s.logit_rows.size()));
    plan.mutable_logit_rows()->Add(s.logit_rows.begin(), s.logit_rows.end());
    for (size_t i = 0; i < s.logit_rows.size(); ++i) plan.add_random_u(s.random_u.empty() ? 0.0 : s.random_u[i]);
    for (size_t i = 0; forces && i < s.logit_rows.size(); ++i) {
      plan.add_forced_tokens(s.forced_tokens.empty() ? -1 : s.forced_tokens[i]);
    }
    const auto it = sent->find(s.seq_id);
    // Sent in full when the sequence (re)starts or its inputs change; omitted otherwise.
    const bool restarts = s.start_pos == 0 || (s.cache && s.cache->is_new);
    if (restarts || it == sent->end() || !same_sampling(it->second, s)) {
      v1::SequenceSampling* entry = plan.add_sampling();
      entry->set_seq_id(s.seq_id);
      entry->mutable_params()->set_temperature(s.sampling.temperature);
      entry->mutable_params()->set_top_k(s.sampling.top_k);
      entry->mutable_params()->set_top_p(s.sampling.top_p);
      entry->mutable_params()->set_min_p(s.sampling.min_p);
      entry->mutable_params()->set_return_full_logits(s.return_full_logits);
      for (const auto& [id, bias] : s.adjust.bias) {
        entry->mutable_params()->add_bias_ids(id);
        entry->mutable_params()->add_bias_values(bias);
      }
      entry->mutable_params()->set_min_tokens(s.adjust.min_tokens);
      entry->mutable_params()->mutable_masked_ids()->Add(s.adjust.masked.begin(), s.adjust.masked.end());
      entry->mutable_params()->set_prompt_len(s.adjust.prompt_len);
      entry->mutable_params()->set_repetition_penalty(s.adjust.repetition_penalty);
      entry->mutable_params()->set_frequency_penalty(s.adjust.frequency_penalty);
      entry->mutable_params()->set_presence_penalty(s.adjust.presence_penalty);
      if (s.adjust.penalizes() && s.start_pos > 0) {
        // The last stage counts the earlier tokens; it has not seen them when this row restarts.
        if (s.history.size() != s.start_pos && restarts) {
          throw StepFailed("sequence " + std::to_string(s.seq_id) + " restarts at " + std::to_string(s.start_pos) +
                           " with penalties but without its earlier tokens");
        }
        entry->mutable_history_ids()->Add(s.history.begin(), s.history.end());
      }
      (*sent)[s.seq_id] = SentSampling{s.sampling, s.return_full_logits, s.adjust};
    }
  }
  return plan;
}

v1::StepMasks encode_step_masks(const std::vector<SeqRequest>& seqs, uint64_t plan_id, uint64_t epoch) {
  v1::StepMasks out;
  out.set_plan_id(plan_id);
  out.set_epoch(epoch);
  std::optional<MaskPacker> packer;
  uint32_t first_row = 0;
  for (const SeqRequest& s : seqs) {
    add_masks(s, first_row, packer);
    first_row += static_cast<uint32_t>(s.logit_rows.size());
  }
  if (!packer) return out;
  v1::TokenMaskSet* m = out.mutable_masks();
  m->set_words(packer->n_words());
  m->mutable_rows()->Add(packer->rows.begin(), packer->rows.end());
  m->mutable_mask_of_row()->Add(packer->mask_of_row.begin(), packer->mask_of_row.end());
  m->mutable_sizes()->Add(packer->sizes.begin(), packer->sizes.end());
  m->mutable_data()->assign(reinterpret_cast<const char*>(packer->data.data()), packer->data.size() * sizeof(uint32_t));
  return out;
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
    r.forced = plan.forced_tokens_size() == n_rows && plan.forced_tokens(i) >= 0;
    if (r.forced && r.token != plan.forced_tokens(i)) throw StepFailed("step result: a forced row has another token");
    r.logsumexp = result.logsumexp(i);
    r.token_logprob = result.token_logprobs_size() == n_rows ? result.token_logprobs(i) : 0.0f;
    const auto first = static_cast<int>(k) * i;
    r.top_ids.assign(result.top_ids().begin() + first, result.top_ids().begin() + first + static_cast<int>(k));
    r.top_logprobs.assign(result.top_logprobs().begin() + first,
                          result.top_logprobs().begin() + first + static_cast<int>(k));
  }
  for (uint64_t f = 0; f < n_full; ++f) {
    const uint32_t row = result.full_logit_rows(static_cast<int>(f));
    if (row >= static_cast<uint32_t>(n_rows)) throw StepFailed("step result: full logits for an unknown row");
    std::vector<float>& dst = out.rows[row].logits;
    dst.resize(n_vocab);
    std::memcpy(dst.data(), bulk.data() + f * n_vocab * sizeof(float), n_vocab * sizeof(float));
  }
  const uint64_t width = result.pooled_width();
  if (static_cast<uint64_t>(result.pooled_size()) != width * static_cast<uint64_t>(n_rows)) {
    throw StepFailed("step result: pooled rows size mismatch");
  }
  for (int i = 0; width > 0 && i < n_rows; ++i) {
    const auto first = result.pooled().begin() + static_cast<int64_t>(width) * i;
    out.rows[static_cast<size_t>(i)].pooled.assign(first, first + static_cast<int64_t>(width));
  }
  decode_speculation(plan, result, &out);
  for (const v1::StageTiming& t : result.timings())
    out.timings.push_back(StageTime{t.rank(), t.compute_us(), t.input_from_shm()});
  return out;
}

}  // namespace ds
