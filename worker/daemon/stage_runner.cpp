// Plan execution on one stage (see stage_runner.h).
#include "worker/daemon/stage_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "common/error.h"
#include "worker/daemon/stage_images.h"
#include "worker/daemon/stage_spec.h"

namespace ds {
namespace v1 = ipc::v1;
namespace {

uint64_t now_us() {
  using namespace std::chrono;
  return static_cast<uint64_t>(duration_cast<microseconds>(system_clock::now().time_since_epoch()).count());
}

uint64_t total_tokens(const v1::StepPlan& plan) {
  return static_cast<uint64_t>(plan.token_ids_size());
}

// A sequence's logit adjustments from its SamplingParams, checked: the edits must stay inside the
// vocabulary (ds::FormatError otherwise, before any step runs on them).
LogitAdjust adjust_of(const v1::SamplingParams& p, uint32_t n_vocab) {
  if (p.bias_ids_size() != p.bias_values_size()) throw FormatError("logit bias ids and values differ in count");
  const auto check_ids = [n_vocab](const auto& ids, const char* what) {
    for (int i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || (n_vocab > 0 && static_cast<uint32_t>(ids[i]) >= n_vocab) || (i > 0 && ids[i] <= ids[i - 1])) {
        throw FormatError(std::string(what) + " ids must be sorted, unique and inside the vocabulary");
      }
    }
  };
  check_ids(p.bias_ids(), "logit bias");
  check_ids(p.masked_ids(), "masked");
  LogitAdjust a;
  for (int i = 0; i < p.bias_ids_size(); ++i) a.bias.emplace_back(p.bias_ids(i), p.bias_values(i));
  a.min_tokens = p.min_tokens();
  a.masked.assign(p.masked_ids().begin(), p.masked_ids().end());
  a.prompt_len = p.prompt_len();
  a.repetition_penalty = p.repetition_penalty();
  a.frequency_penalty = p.frequency_penalty();
  a.presence_penalty = p.presence_penalty();
  // The request layer checks the OpenAI ranges; here only what would make the edits meaningless.
  if (!(a.repetition_penalty > 0.0f) || !std::isfinite(a.repetition_penalty) || !std::isfinite(a.frequency_penalty) ||
      !std::isfinite(a.presence_penalty)) {
    throw FormatError("penalties must be finite, the repetition penalty > 0");
  }
  return a;
}

std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

void describe_chunk(uint64_t plan_id, uint64_t rows, uint64_t cols, size_t nbytes, v1::HiddenChunk* chunk) {
  chunk->set_plan_id(plan_id);
  chunk->set_dtype(v1::DTYPE_F32);
  chunk->add_shape(rows);
  chunk->add_shape(cols);
  chunk->set_nbytes(nbytes);
}

// The placement columns: all per-row arrays present (managed) or all absent.
void validate_placement(const v1::StepPlan& plan) {
  const int n = plan.seq_ids_size();
  if (!plan.managed_memory()) {
    if (plan.state_slots_size() || plan.is_new_size() || plan.load_snapshots_size() || plan.save_snapshots_size() ||
        plan.n_block_ids_size() || plan.block_ids_size()) {
      throw FormatError("plan " + std::to_string(plan.plan_id()) + ": placement columns without managed_memory");
    }
    return;
  }
  if (plan.state_slots_size() != n || plan.is_new_size() != n || plan.load_snapshots_size() != n ||
      plan.save_snapshots_size() != n || plan.n_block_ids_size() != n) {
    throw FormatError("plan " + std::to_string(plan.plan_id()) + ": placement arrays differ in length");
  }
  uint64_t blocks = 0;
  for (int i = 0; i < n; ++i) {
    if (plan.load_snapshots(i) < -1 || plan.save_snapshots(i) < -1) throw FormatError("plan: negative snapshot id");
    if (plan.load_snapshots(i) >= 0 && !plan.is_new(i)) throw FormatError("plan: snapshot load on a running sequence");
    blocks += plan.n_block_ids(i);
  }
  if (blocks != static_cast<uint64_t>(plan.block_ids_size())) {
    throw FormatError("plan: block_ids length != sum of n_block_ids");
  }
}

std::optional<uint32_t> snapshot_id(int32_t v) {
  return v < 0 ? std::nullopt : std::optional<uint32_t>(static_cast<uint32_t>(v));
}

int32_t forced_token(const v1::StepPlan& plan, int row) {
  return plan.forced_tokens_size() == 0 ? -1 : plan.forced_tokens(row);
}

// Forced rows (prompt logprobs): one id per logit row or none, ids in the head's vocabulary
// (when known), never on a speculating sequence's rows.
void validate_forced(const v1::StepPlan& plan, uint64_t rows, uint32_t head_vocab) {
  if (plan.forced_tokens_size() == 0) return;
  if (static_cast<uint64_t>(plan.forced_tokens_size()) != rows) {
    throw FormatError("plan: forced_tokens length != sum of n_logit_rows");
  }
  int row = 0;
  for (int i = 0; i < plan.seq_ids_size(); ++i) {
    const bool speculates = plan.spec_k_size() > 0 && (plan.spec_k(i) > 0 || plan.n_drafts(i) > 0);
    for (uint32_t r = 0; r < plan.n_logit_rows(i); ++r, ++row) {
      const int32_t id = plan.forced_tokens(row);
      if (id < -1 || (head_vocab != 0 && id >= 0 && static_cast<uint32_t>(id) >= head_vocab)) {
        throw FormatError("plan: forced token " + std::to_string(id) + " outside the vocabulary");
      }
      if (id >= 0 && speculates) throw FormatError("plan: a forced row on a speculating sequence");
    }
  }
}

}  // namespace

void validate_plan(const v1::StepPlan& plan, uint32_t n_vocab, uint32_t head_vocab) {
  const int n = plan.seq_ids_size();
  if (n == 0) throw FormatError("plan " + std::to_string(plan.plan_id()) + " has no sequences");
  if (plan.start_positions_size() != n || plan.n_tokens_size() != n || plan.n_logit_rows_size() != n) {
    throw FormatError("plan " + std::to_string(plan.plan_id()) + ": per-sequence arrays differ in length");
  }
  std::unordered_set<uint64_t> seen;
  uint64_t tokens = 0, rows = 0;
  for (int i = 0; i < n; ++i) {
    if (!seen.insert(plan.seq_ids(i)).second) throw FormatError("plan names a sequence twice");
    if (plan.n_tokens(i) == 0) throw FormatError("plan has a sequence without tokens");
    for (uint32_t r = 0; r < plan.n_logit_rows(i); ++r) {
      if (rows + r >= static_cast<uint64_t>(plan.logit_rows_size())) throw FormatError("plan: logit_rows too short");
      if (plan.logit_rows(static_cast<int>(rows + r)) >= plan.n_tokens(i)) {
        throw FormatError("plan: logit row outside its sequence's tokens");
      }
    }
    tokens += plan.n_tokens(i);
    rows += plan.n_logit_rows(i);
  }
  if (tokens != total_tokens(plan)) throw FormatError("plan: token_ids length != sum of n_tokens");
  validate_placement(plan);
  validate_speculation(plan);
  if (rows != static_cast<uint64_t>(plan.logit_rows_size()) || rows != static_cast<uint64_t>(plan.random_u_size())) {
    throw FormatError("plan: logit_rows / random_u length != sum of n_logit_rows");
  }
  validate_forced(plan, rows, head_vocab);
  validate_images(plan);
  for (int32_t t : plan.token_ids()) {
    if (t < 0 || (n_vocab != 0 && static_cast<uint32_t>(t) >= n_vocab)) {
      throw FormatError("plan: token id " + std::to_string(t) + " outside the vocabulary");
    }
  }
}

StageRunner::StageRunner(std::unique_ptr<StageModel> model, StageShape shape)
    : model_(std::move(model)), shape_(shape), handoff_(shape.n_embd) {}

void StageRunner::remember_sampling(const v1::StepPlan& plan) {
  for (const v1::SequenceSampling& s : plan.sampling()) {
    SeqSampling& dst = sampling_[s.seq_id()];
    dst.params.temperature = s.params().temperature();
    dst.params.top_k = s.params().top_k();
    dst.params.top_p = s.params().top_p();
    dst.params.min_p = s.params().min_p();
    dst.adjust = adjust_of(s.params(), shape_.n_vocab);
    dst.full_logits = s.params().return_full_logits();
    if (!dst.adjust.penalizes()) {
      dst.history.reset();
      continue;
    }
    for (const int32_t id : s.history_ids()) {
      if (id < 0 || (shape_.n_vocab > 0 && static_cast<uint32_t>(id) >= shape_.n_vocab)) {
        throw FormatError("history id " + std::to_string(id) + " outside the vocabulary");
      }
    }
    // Tokens already held stay (a rule resent mid-sequence); a row from position 0 overwrites them.
    std::vector<int32_t> known = s.history_ids_size() > 0 || !dst.history
                                     ? std::vector<int32_t>(s.history_ids().begin(), s.history_ids().end())
                                     : dst.history->tokens();
    dst.history.emplace(dst.adjust.prompt_len);
    dst.history->reset(known);
  }
}

StepInput StageRunner::build_input(const v1::StepPlan& plan) const {
  StepInput in;
  int tok = 0, row = 0, block = 0;
  for (int i = 0; i < plan.seq_ids_size(); ++i) {
    if (plan.managed_memory()) {
      SeqCache c;
      c.state_slot = plan.state_slots(i);
      c.is_new = plan.is_new(i);
      c.load_snapshot = snapshot_id(plan.load_snapshots(i));
      c.save_snapshot = snapshot_id(plan.save_snapshots(i));
      const auto first = plan.block_ids().begin() + block;
      block += static_cast<int>(plan.n_block_ids(i));
      c.block_ids.assign(first, plan.block_ids().begin() + block);
      in.cache.push_back(std::move(c));
    }
    SeqStep s;
    s.seq_id = plan.seq_ids(i);
    s.start_pos = plan.start_positions(i);
    s.token_ids.assign(plan.token_ids().begin() + tok,
                       plan.token_ids().begin() + tok + static_cast<int>(plan.n_tokens(i)));
    s.logit_rows.assign(plan.logit_rows().begin() + row,
                        plan.logit_rows().begin() + row + static_cast<int>(plan.n_logit_rows(i)));
    tok += static_cast<int>(plan.n_tokens(i));
    row += static_cast<int>(plan.n_logit_rows(i));
    in.seqs.push_back(std::move(s));
  }
  apply_speculation_columns(plan, &in);
  apply_image_columns(plan, model_->is_first(), &in);
  return in;
}

HostRows StageRunner::host_rows(const v1::StepPlan& plan, std::span<const uint8_t> hidden_bytes,
                                std::vector<float>* hidden_storage, const HiddenBuffer& hidden_out,
                                HostSignal hidden_ready) const {
  HostRows rows;
  const uint64_t chunk_bytes = total_tokens(plan) * shape_.n_embd * sizeof(float);
  if (!model_->is_first()) {
    if (hidden_bytes.size() != chunk_bytes) {
      throw FormatError("hidden chunk has " + std::to_string(hidden_bytes.size()) + " bytes, expected " +
                        std::to_string(chunk_bytes));
    }
    if (reinterpret_cast<uintptr_t>(hidden_bytes.data()) % alignof(float) == 0) {
      // Read in place (a page-aligned ring slot or an allocator's buffer): no copy.
      rows.in = reinterpret_cast<const float*>(hidden_bytes.data());
      rows.in_ready = hidden_ready;
      rows.in_ready_on_host = ready_on_host_;
    } else {
      // Copied into float storage: this transport buffer carries no alignment guarantee (ring
      // slots always have it), so the copy waits for the bytes first.
      if (hidden_ready) hidden_ready.wait();
      hidden_storage->resize(hidden_bytes.size() / sizeof(float));
      std::memcpy(hidden_storage->data(), hidden_bytes.data(), hidden_bytes.size());
      rows.in = hidden_storage->data();
    }
  }
  if (!model_->is_last() && hidden_out) {
    const HiddenDestination dst = hidden_out(chunk_bytes);
    if (dst.bytes.size() == chunk_bytes && reinterpret_cast<uintptr_t>(dst.bytes.data()) % alignof(float) == 0) {
      rows.out = reinterpret_cast<float*>(dst.bytes.data());
      rows.out_ready = dst.ready;
    }
  }
  return rows;
}

StageOutputMessage StageRunner::run(const v1::StepPlan& plan, std::span<const uint8_t> hidden_bytes,
                                    const google::protobuf::RepeatedPtrField<v1::StageTiming>& timings,
                                    const HiddenBuffer& hidden_out, HostSignal hidden_ready,
                                    const MaskFetch& fetch_masks) {
  const uint64_t received = now_us();
  validate_plan(plan, model_->is_first() ? shape_.n_vocab : 0, shape_.n_vocab);
  // Releases come first: a released sequence's slot may be reused by a new row of this plan.
  for (uint64_t id : plan.released_seq_ids()) forget(id);
  StepInput in = build_input(plan);
  std::vector<float> hidden_storage, hidden;
  const HostRows rows = host_rows(plan, hidden_bytes, &hidden_storage, hidden_out, hidden_ready);
  const bool pooling = model_->is_last() && shape_.head != OutputHead::kLanguageModel;
  if (pooling && (plan_speculates(plan) || plan.masks_follow() || plan.forced_tokens_size() != 0)) {
    throw FormatError(std::string("plan: a ") + output_head_name(shape_.head) +
                      " model neither samples, speculates nor takes grammar masks");
  }
  if (model_->is_last() && !pooling) {
    remember_sampling(plan);  // the digest requests need this plan's rules
    in.digest_rows = digest_requests(plan);
    in.logit_edits = logit_edits(plan);
    if (plan.masks_follow()) {
      if (!fetch_masks) throw FormatError("plan: its masks follow, but this stage has no way to receive them");
      in.token_masks = PendingTokenMasks([this, &plan, &fetch_masks] { return token_masks(plan, fetch_masks(plan)); });
    }
  }
  const size_t out_bytes = total_tokens(plan) * shape_.n_embd * sizeof(float);
  StepOutput out;
  const auto t0 = std::chrono::steady_clock::now();
  const bool deferred = handoff_.step(*model_, in, rows, &out, &hidden);
  in.token_masks.get();  // masks the model did not ask for are still taken off the wire
  const auto compute_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  for (const SeqStep& s : in.seqs) live_[s.seq_id] = s.start_pos + s.n_tokens();

  v1::StageTiming mine;
  mine.set_rank(shape_.rank);
  mine.set_compute_us(static_cast<uint64_t>(compute_us.count()));
  mine.set_receive_unix_us(received);

  StageOutputMessage msg;
  if (!model_->is_last()) {
    v1::StageForward* fwd = msg.env.mutable_stage_forward();
    *fwd->mutable_plan() = plan;
    // The pixels were for this stage only (the later ones need the spans, not the images). This
    // copies them once more before dropping them: a few MB on the steps that carry an image.
    fwd->mutable_plan()->clear_image_pixels();
    *fwd->mutable_timings() = timings;
    *fwd->add_timings() = mine;
    msg.hidden_in_place = rows.out != nullptr;
    msg.hidden_deferred = deferred;
    if (!msg.hidden_in_place) msg.bulk = float_bytes(hidden);
    describe_chunk(plan.plan_id(), total_tokens(plan), shape_.n_embd, out_bytes, fwd->mutable_hidden());
    return msg;
  }
  v1::StepResult* result = msg.env.mutable_step_result();
  if (pooling) {
    pack_pooled(plan, out, result);
    *result->mutable_timings() = timings;
    *result->add_timings() = mine;
    return msg;
  }
  pack_result(plan, out, result, &msg.bulk);
  if (plan_speculates(plan)) {
    if (!spec_) spec_ = std::make_unique<SpecDecoder>(*model_, shape_.n_embd, shape_.n_vocab);
    run_speculation(
        plan, out, shape_.n_embd, shape_.n_vocab,
        [this](uint64_t id) {
          const auto it = sampling_.find(id);
          return it == sampling_.end() ? SamplingRule{} : it->second.params;
        },
        spec_.get(), result);
  }
  *result->mutable_timings() = timings;
  *result->add_timings() = mine;
  return msg;
}

// Each logit row's edits (logit_bias, min_tokens masks), in the order forward() lays the rows.
std::vector<LogitEdit> StageRunner::logit_edits(const v1::StepPlan& plan) {
  std::vector<LogitEdit> edits;
  uint32_t row = 0;
  int logit_row = 0, tok = 0;
  for (int i = 0; i < plan.seq_ids_size(); ++i) {
    const uint32_t start = plan.start_positions(i), n_tokens = plan.n_tokens(i);
    const auto it = sampling_.find(plan.seq_ids(i));
    SeqSampling* s = it == sampling_.end() ? nullptr : &it->second;
    TokenHistory* history = s != nullptr && s->history ? &*s->history : nullptr;
    try {
      if (history != nullptr) history->write(start, plan.token_ids().data() + tok, n_tokens);
      tok += static_cast<int>(n_tokens);
      for (uint32_t r = 0; r < plan.n_logit_rows(i); ++r, ++row, ++logit_row) {
        if (s == nullptr || s->adjust.empty() || forced_token(plan, static_cast<int>(row)) >= 0) continue;
        // The row at position start + logit_row picks the token of the next position, and sees
        // the tokens up to its own (drafts before it included).
        const uint32_t next_pos = start + plan.logit_rows(logit_row) + 1;
        if (history != nullptr) history->count_to(next_pos);
        append_adjust_edits(s->adjust, history, row, next_pos, &edits);
      }
    } catch (const std::invalid_argument& e) {
      throw FormatError("sequence " + std::to_string(plan.seq_ids(i)) + ": " + e.what());
    }
  }
  return edits;
}

// The plan's grammar masks, rows indexed as the logit edits' (checked against the plan's rows
// and the vocabulary before any is applied).
TokenMasks StageRunner::token_masks(const v1::StepPlan& plan, const v1::StepMasks& masks) const {
  if (!masks.abandoned().empty()) throw std::runtime_error("grammar masks abandoned: " + masks.abandoned());
  if (masks.plan_id() != plan.plan_id()) {
    throw FormatError("masks of plan " + std::to_string(masks.plan_id()) + " for plan " +
                      std::to_string(plan.plan_id()));
  }
  const v1::TokenMaskSet& set = masks.masks();
  if (set.rows_size() == 0) {
    if (!set.data().empty() || set.sizes_size() != 0) throw FormatError("masks: data without rows");
    return {};
  }
  if (set.words() == 0 || set.data().size() % sizeof(uint32_t) != 0) {
    throw FormatError("masks: words and data do not fit together");
  }
  try {
    // The data's bytes are not 4-aligned in general: copied into words first.
    std::vector<uint32_t> data(set.data().size() / sizeof(uint32_t));
    std::memcpy(data.data(), set.data().data(), data.size() * sizeof(uint32_t));
    TokenMasks m = unpack_token_masks(set.words(), {set.rows().begin(), set.rows().end()},
                                      {set.mask_of_row().begin(), set.mask_of_row().end()},
                                      {set.sizes().begin(), set.sizes().end()}, data.data(), data.size());
    check_token_masks(m, static_cast<size_t>(plan.logit_rows_size()), shape_.n_vocab);
    return m;
  } catch (const std::invalid_argument& e) {
    throw FormatError(std::string("masks: ") + e.what());
  }
}

// A reference, never a copy: a penalized sequence's entry holds its whole token history (two
// copies per sequence per step cost ~20K allocations at 16 streams).
const StageRunner::SeqSampling& StageRunner::sampling_of(uint64_t seq_id) const {
  static const SeqSampling kDefault;
  const auto it = sampling_.find(seq_id);
  return it == sampling_.end() ? kDefault : it->second;
}

// One request per logit row, so the model may digest on its device; none (full logits) when a
// sequence of the plan wants its full logits row, or when a speculating sequence with logits
// samples (temperature > 0: its rejection rule needs the whole rows p and q). Greedy verify rows
// need only their argmax, which the digest carries.
std::vector<DigestRequest> StageRunner::digest_requests(const v1::StepPlan& plan) const {
  std::vector<DigestRequest> req;
  int row = 0;
  for (int i = 0; i < plan.seq_ids_size(); ++i) {
    const SeqSampling& sampling = sampling_of(plan.seq_ids(i));
    if (sampling.full_logits && plan.n_logit_rows(i) > 0) return {};
    const bool verifies = row_speculates(plan, i) && plan.n_logit_rows(i) > 0;
    if (verifies && sampling.params.temperature > 0.0f) return {};
    for (uint32_t r = 0; r < plan.n_logit_rows(i); ++r, ++row) {
      const int32_t forced = forced_token(plan, row);
      req.push_back({forced >= 0 ? SamplingRule{} : sampling.params, plan.random_u(row), forced});
    }
  }
  return req;
}

void StageRunner::pack_result(const v1::StepPlan& plan, const StepOutput& out, v1::StepResult* result,
                              std::vector<uint8_t>* bulk) const {
  const size_t n_rows = static_cast<size_t>(plan.logit_rows_size());
  const bool digested = !out.digests.empty();  // the model digested on its device
  if (digested && out.digests.size() != n_rows) {
    throw FormatError("model returned " + std::to_string(out.digests.size()) + " digests for " +
                      std::to_string(n_rows) + " rows");
  }
  const size_t n_vocab = digested ? out.digest_n_vocab : n_rows == 0 ? 0 : out.logits.size() / n_rows;
  if (!digested && n_rows != 0 && (n_vocab == 0 || out.logits.size() != n_rows * n_vocab)) {
    throw FormatError("model returned " + std::to_string(out.logits.size()) + " logits for " + std::to_string(n_rows) +
                      " rows");
  }
  result->set_plan_id(plan.plan_id());
  result->set_epoch(plan.epoch());
  result->set_top_k(static_cast<uint32_t>(std::min<size_t>(kDigestTopK, n_vocab)));
  result->set_n_vocab(static_cast<uint32_t>(n_vocab));
  std::vector<float> full;
  int row = 0;
  for (int i = 0; i < plan.seq_ids_size(); ++i) {
    const SeqSampling& sampling = sampling_of(plan.seq_ids(i));
    for (uint32_t r = 0; r < plan.n_logit_rows(i); ++r, ++row) {
      const float* logits = digested ? nullptr : out.logits.data() + static_cast<size_t>(row) * n_vocab;
      const int32_t forced = forced_token(plan, row);
      const DigestRequest q{forced >= 0 ? SamplingRule{} : sampling.params, plan.random_u(row), forced};
      const LogitDigest d = digested ? out.digests[static_cast<size_t>(row)] : digest_request(logits, n_vocab, q);
      result->add_seq_ids(plan.seq_ids(i));
      result->add_rows(plan.logit_rows(row));
      result->add_tokens(d.token);
      result->add_logsumexp(d.logsumexp);
      result->add_token_logprobs(d.token_logprob);
      for (size_t k = 0; k < d.top_ids.size(); ++k) {
        result->add_top_ids(d.top_ids[k]);
        result->add_top_logprobs(d.top_logprobs[k]);
      }
      if (sampling.full_logits && logits != nullptr) {  // digest_requests never digests such a plan
        result->add_full_logit_rows(static_cast<uint32_t>(row));
        full.insert(full.end(), logits, logits + n_vocab);
      }
    }
  }
  if (!full.empty()) {
    *bulk = float_bytes(full);
    describe_chunk(plan.plan_id(), static_cast<uint64_t>(result->full_logit_rows_size()), n_vocab, bulk->size(),
                   result->mutable_full_logits());
  }
}

// A pooling model's rows: its pooled output per requested row (the embedding model's final
// hidden states, the reranker's classifier logits), nothing sampled.
void StageRunner::pack_pooled(const v1::StepPlan& plan, const StepOutput& out, v1::StepResult* result) const {
  const size_t n_rows = static_cast<size_t>(plan.logit_rows_size());
  const std::vector<float>& pooled = shape_.head == OutputHead::kEmbedding ? out.final_hidden : out.logits;
  if (n_rows != 0 && (pooled.empty() || pooled.size() % n_rows != 0)) {
    throw FormatError("model returned " + std::to_string(pooled.size()) + " pooled values for " +
                      std::to_string(n_rows) + " rows");
  }
  result->set_plan_id(plan.plan_id());
  result->set_epoch(plan.epoch());
  result->set_pooled_width(n_rows == 0 ? 0 : static_cast<uint32_t>(pooled.size() / n_rows));
  result->mutable_pooled()->Add(pooled.begin(), pooled.end());
  int row = 0;
  for (int i = 0; i < plan.seq_ids_size(); ++i) {
    for (uint32_t r = 0; r < plan.n_logit_rows(i); ++r, ++row) {
      result->add_seq_ids(plan.seq_ids(i));
      result->add_rows(plan.logit_rows(row));
      result->add_tokens(0);
      result->add_logsumexp(0.0);
      result->add_token_logprobs(0.0f);
    }
  }
}

void StageRunner::drop(const v1::DropSequences& drop) {
  if (drop.all()) {
    model_->drop_all();
    if (spec_) spec_->forget_all();
    sampling_.clear();
    live_.clear();
    return;
  }
  for (uint64_t id : drop.seq_ids()) forget(id);
}

void StageRunner::forget(uint64_t seq_id) {
  model_->drop_sequence(seq_id);
  if (spec_) spec_->forget(seq_id);
  sampling_.erase(seq_id);
  live_.erase(seq_id);
}

}  // namespace ds
