// Bookkeeping half of the scheduler: requests in, step results in, resources out.
#include <algorithm>
#include <stdexcept>
#include <utility>

#include "coordinator/scheduler/scheduler.h"

namespace ds {
namespace {

uint32_t blocks_for(uint64_t tokens, uint32_t block_size) {
  return static_cast<uint32_t>((tokens + block_size - 1) / block_size);
}

// The images lie inside the prompt, well formed, each with its pixels.
void check_images(const GenerationRequest& request) {
  std::vector<ImageSpan> spans;
  for (const PromptImage& im : request.images) {
    if (!im.pixels) throw std::invalid_argument("an image without pixels");
    if (uint64_t{im.span.first_pos} + im.span.n_tokens() > request.prompt_ids.size()) {
      throw std::invalid_argument("an image lies past the prompt's end");
    }
    spans.push_back(im.span);
  }
  if (const char* problem = image_spans_problem(spans)) throw std::invalid_argument(problem);
}

void check_config(const SchedulerConfig& c) {
  if (c.block_size == 0 || c.num_blocks == 0 || c.max_batch_tokens == 0 || c.max_seqs == 0 || c.max_context == 0) {
    throw std::invalid_argument("scheduler config: sizes must be positive");
  }
  if (c.max_steps_in_flight == 0 || c.decode_groups == 0) {
    throw std::invalid_argument("scheduler config: steps in flight and decode groups must be positive");
  }
  if (c.spec_k > kMaxSpecK) {
    throw std::invalid_argument("scheduler config: spec_k " + std::to_string(c.spec_k) + " above " +
                                std::to_string(kMaxSpecK) + " (the workers' rollback depth)");
  }
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config)
    : config_((check_config(config), std::move(config))),
      blocks_(config_.num_blocks, config_.block_size),
      slots_(config_.max_seqs),
      snapshots_(config_.num_snapshots),
      prefix_(blocks_, snapshots_, config_.hash_seed, config_.stateless),
      eos_(config_.eos_token_ids.begin(), config_.eos_token_ids.end()) {}

void Scheduler::add_request(const GenerationRequest& request) {
  const auto prompt = static_cast<uint64_t>(request.prompt_ids.size());
  if (request.request_id.empty()) throw std::invalid_argument("empty request id");
  if (seqs_.count(request.request_id) != 0) {
    throw std::invalid_argument("duplicate request id " + request.request_id);
  }
  if (prompt == 0) throw std::invalid_argument("empty prompt");
  if (prompt >= config_.max_context) {
    throw std::invalid_argument("prompt of " + std::to_string(prompt) + " tokens leaves no room in a context of " +
                                std::to_string(config_.max_context));
  }
  if (request.sampling.max_tokens == 0) throw std::invalid_argument("max_tokens must be > 0");
  check_images(request);
  // A sequence that cannot fit in all of memory alone would be preempted forever. With
  // speculation its blocks run up to 2 spec_k positions ahead (drafts + MTP draft rows).
  uint64_t longest =
      std::min<uint64_t>(prompt + request.sampling.max_tokens + 2ULL * config_.spec_k, config_.max_context);
  if (blocks_for(longest, config_.block_size) > config_.num_blocks) {
    throw std::invalid_argument("request needs more KV blocks than the workers hold");
  }
  auto s = std::make_unique<Sequence>();
  s->uid = next_uid_++;
  s->request_id = request.request_id;
  s->tokens = request.prompt_ids;
  for (const PromptImage& im : request.images) s->images.push_back(im.span);
  if (!s->images.empty()) s->key_tokens = image_key_tokens(s->tokens, s->images, config_.hash_seed);
  s->prompt_len = static_cast<uint32_t>(prompt);
  s->sampling = request.sampling;
  waiting_.push_back(s.get());
  seqs_.emplace(request.request_id, std::move(s));
}

UpdateResult Scheduler::update_from_output(const SampledStep& output) {
  const auto flying = std::find_if(in_flight_.begin(), in_flight_.end(),
                                   [&](const InFlight& f) { return f.step_id == output.step_id; });
  if (flying == in_flight_.end()) throw std::logic_error("update_from_output for a step that is not in flight");
  if (output.sampled.size() != flying->rows.size()) {
    throw std::invalid_argument("step output has " + std::to_string(output.sampled.size()) + " rows, plan had " +
                                std::to_string(flying->rows.size()));
  }
  if ((!output.accepted.empty() && output.accepted.size() != output.sampled.size()) ||
      (!output.drafts.empty() && output.drafts.size() != output.sampled.size())) {
    throw std::invalid_argument("step output: speculative columns differ in length from the rows");
  }
  InFlight step = std::move(*flying);
  in_flight_.erase(flying);
  for (const auto& row : step.rows) busy_.erase(row.second);
  for (uint32_t id : step.pending_snapshots) snapshots_.commit(id);
  UpdateResult result;
  for (size_t i = 0; i < step.rows.size(); ++i) {
    auto it = seqs_.find(step.rows[i].first);
    if (it == seqs_.end() || it->second->uid != step.rows[i].second) continue;  // aborted
    Sequence& s = *it->second;
    publish_computed(s, s.num_computed);
    if (s.remaining() != 0) continue;  // a prefill chunk that needs no logits
    apply_row_output(s, output, i, result);
  }
  return result;
}

// The tokens a row with logits emitted: its accepted drafts (computed by this step, so
// num_computed follows them), then the sampled token. Stops at the first token that ends the
// sequence. False when the sequence finished (it is destroyed).
bool Scheduler::apply_row_output(Sequence& s, const SampledStep& output, size_t row, UpdateResult& result) {
  const uint32_t accepted = output.accepted.empty() ? 0 : output.accepted[row];
  if (accepted > s.verifying) {
    throw std::invalid_argument("step output accepts " + std::to_string(accepted) + " drafts of " +
                                std::to_string(s.verifying) + " for " + s.request_id);
  }
  const uint32_t verified = std::exchange(s.verifying, 0);
  if (verified > 0) {
    for (SpecCounts* c : {&s.spec, &counters_.spec}) {
      c->drafted += verified;
      c->accepted += accepted;
      ++c->steps;
    }
  }
  std::vector<int32_t> drafts = std::move(s.drafts);
  s.drafts.clear();
  for (uint32_t j = 0; j < accepted; ++j) {
    ++s.num_computed;
    if (!append_token(s, drafts[j], result)) return false;
  }
  s.rewind = accepted < verified;  // the workers hold rejected positions past num_computed
  if (!append_token(s, output.sampled[row], result)) return false;
  if (!output.drafts.empty()) s.drafts = output.drafts[row];
  return true;
}

// Appends one generated token; false when it ended the sequence (finished and destroyed).
bool Scheduler::append_token(Sequence& s, int32_t token, UpdateResult& result) {
  s.tokens.push_back(token);
  if (!s.key_tokens.empty()) s.key_tokens.push_back(token);
  result.tokens.push_back(TokenEvent{s.request_id, token, s.generated() == 1});
  auto reason = finish_reason(s);
  if (!reason) return true;
  publish_computed(s, s.num_computed);
  finish(s, *reason, result);
  return false;
}

bool Scheduler::abort(const std::string& request_id) {
  auto it = seqs_.find(request_id);
  if (it == seqs_.end()) return false;
  Sequence& s = *it->second;
  if (s.slot) {
    free_resources(s, pending_releases_);
    remove_running(s);
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), &s));
  }
  seqs_.erase(it);
  return true;
}

void Scheduler::reset_worker_state() {
  in_flight_.clear();
  busy_.clear();
  std::vector<Sequence*> order = running_;
  for (auto it = order.rbegin(); it != order.rend(); ++it) preempt(**it, pending_releases_);
  snapshots_.clear();
  blocks_.clear_cache();
}

// Full blocks below `end` now hold computed KV: offer them to later prompts.
void Scheduler::publish_computed(Sequence& s, uint32_t end) {
  if (!cache_enabled()) return;  // without snapshots no GDN layer could use them
  auto full = std::min<uint32_t>(end / config_.block_size, static_cast<uint32_t>(s.blocks.size()));
  if (full <= s.published_blocks) return;
  prefix_.extend_hashes(s.cache_tokens(), s.hashes);
  prefix_.publish(s.cache_tokens(), s.hashes, s.blocks, s.published_blocks, full);
  s.published_blocks = full;
}

std::optional<FinishReason> Scheduler::finish_reason(const Sequence& s) const {
  int32_t last = s.tokens.back();
  const auto& stops = s.sampling.stop_token_ids;
  if (!s.sampling.ignore_eos && eos_.count(last) != 0) return FinishReason::kStop;
  if (std::find(stops.begin(), stops.end(), last) != stops.end()) return FinishReason::kStop;
  if (s.generated() >= s.sampling.max_tokens) return FinishReason::kLength;
  if (s.num_tokens() >= config_.max_context) return FinishReason::kLength;
  return std::nullopt;
}

void Scheduler::finish(Sequence& s, FinishReason reason, UpdateResult& result) {
  result.finished.push_back(FinishEvent{s.request_id, reason, s.prompt_len, s.generated(), s.cached_tokens, s.spec});
  free_resources(s, pending_releases_);
  remove_running(s);
  seqs_.erase(s.request_id);  // destroys s
}

// Tail blocks are released first so that, among cached free blocks, a sequence's prefix
// is evicted last: prefixes are what other requests share.
void Scheduler::free_resources(Sequence& s, std::vector<ReleasedSeq>& released) {
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) blocks_.release(*it);
  s.blocks.clear();
  if (s.slot) {
    slots_.release(*s.slot);
    released.push_back(ReleasedSeq{s.request_id, *s.slot});
    s.slot.reset();
  }
}

void Scheduler::remove_running(const Sequence& s) {
  running_.erase(std::find(running_.begin(), running_.end(), &s));
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats st = counters_;
  st.waiting = static_cast<uint32_t>(waiting_.size());
  st.running = static_cast<uint32_t>(running_.size());
  st.free_blocks = blocks_.num_free();
  st.free_slots = slots_.num_free();
  st.snapshots = snapshots_.size();
  st.block_evictions = blocks_.num_evictions();
  st.snapshot_evictions = snapshots_.num_evictions();
  return st;
}

std::string Scheduler::check_invariants() const {
  std::string why = blocks_.check_invariants();
  if (why.empty()) why = snapshots_.check_invariants();
  if (why.empty()) why = check_sequences();
  return why;
}

// Every block reference comes from exactly one live block-table entry, every running
// sequence holds one slot and enough blocks for what it computed, waiting ones hold none.
std::string Scheduler::check_sequences() const {
  if (running_.size() + waiting_.size() != seqs_.size()) return "sequence lists out of sync";
  if (running_.size() > config_.max_seqs) return "more live sequences than max_seqs";
  if (slots_.num_free() + running_.size() != slots_.capacity()) return "state slots leaked";
  std::vector<uint32_t> refs(config_.num_blocks, 0);
  std::vector<bool> slot_seen(config_.max_seqs, false);
  for (const Sequence* s : running_) {
    if (!s->slot || slot_seen[*s->slot] || !slots_.in_use(*s->slot)) return "bad slot";
    slot_seen[*s->slot] = true;
    if (s->blocks.size() * config_.block_size < s->num_computed) return "too few blocks";
    if (s->blocks.size() > blocks_for(s->num_tokens() + 2ULL * config_.spec_k, config_.block_size)) {
      return "over-allocated blocks for " + s->request_id;
    }
    for (uint32_t b : s->blocks) ++refs[b];
  }
  for (const Sequence* s : waiting_) {
    if (s->slot || !s->blocks.empty() || s->num_computed != 0) return "waiting holds memory";
  }
  for (uint32_t b = 0; b < config_.num_blocks; ++b) {
    if (refs[b] != blocks_.ref_count(b)) return "ref count of block " + std::to_string(b);
  }
  return {};
}

}  // namespace ds
