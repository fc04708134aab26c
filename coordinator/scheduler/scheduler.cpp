// Planning half of the scheduler: which sequences run this step, how many tokens each,
// and which memory they use. Results and bookkeeping live in scheduler_update.cpp.
#include "coordinator/scheduler/scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace ds {

StepPlan Scheduler::schedule() {
  if (in_flight_.size() >= std::max<uint32_t>(config_.max_steps_in_flight, 1)) {
    throw std::logic_error("schedule() with " + std::to_string(in_flight_.size()) +
                           " steps in flight (the most allowed)");
  }
  StepPlan plan;
  plan.step_id = next_step_++;
  plan.released = std::move(pending_releases_);
  pending_releases_.clear();
  scheduled_.clear();
  building_ = InFlight{plan.step_id, {}, {}, false};
  uint32_t budget = config_.max_batch_tokens;
  size_t released_before = plan.released.size();
  if (may_plan_decode_rows()) schedule_running(plan, budget, /*decode=*/true);
  schedule_running(plan, budget, /*decode=*/false);
  // After a preemption memory is short: admitting now would only preempt again.
  if (plan.released.size() == released_before) schedule_waiting(plan, budget);
  if (!plan.seqs.empty()) {
    for (const auto& row : building_.rows) busy_.insert(row.second);
    in_flight_.push_back(std::move(building_));
  }
  return plan;
}

// Running, not yet in this plan and not in a step in flight (whose result would change it).
bool Scheduler::available(const Sequence& s) const {
  return s.slot && scheduled_.count(s.uid) == 0 && busy_.count(s.uid) == 0;
}

bool Scheduler::may_plan_decode_rows() const {
  const auto decoding =
      std::count_if(in_flight_.begin(), in_flight_.end(), [](const InFlight& f) { return f.decodes; });
  return static_cast<uint32_t>(decoding) < std::max<uint32_t>(config_.decode_groups, 1);
}

uint32_t Scheduler::decode_rows_per_step() const {
  const uint32_t groups = std::max<uint32_t>(config_.decode_groups, 1);
  return (static_cast<uint32_t>(running_.size()) + groups - 1) / groups;
}

void Scheduler::schedule_running(StepPlan& plan, uint32_t& budget, bool decode) {
  std::vector<Sequence*> order = running_;  // copy: preemption edits running_
  uint32_t rows_left = decode ? decode_rows_per_step() : UINT32_MAX;
  for (Sequence* s : order) {
    if (budget == 0 || rows_left == 0) return;
    if (!available(*s)) continue;  // preempted, done, or busy
    if ((s->remaining() == 1) != decode) continue;
    if (schedule_running_seq(*s, plan, budget)) {
      --rows_left;
      building_.decodes = building_.decodes || decode;
    }
  }
}

// Schedules the next tokens of a running sequence. A prefill chunk shrinks to the free
// blocks; when not even one token fits, the youngest sequence not yet in this step (nor in
// one in flight) is preempted (possibly `s` itself, which then gives up its turn). When every
// other sequence is busy, `s` waits for their results instead.
bool Scheduler::schedule_running_seq(Sequence& s, StepPlan& plan, uint32_t& budget) {
  uint32_t start = s.num_computed;
  uint32_t end = chunk_end(s, start, budget);
  for (;;) {
    const uint32_t capacity = capacity_end(s.blocks.size(), blocks_.num_free());
    uint32_t fit = std::min(end, capacity);
    if (fit > start) {
      const RowSpec spec = plan_speculation(s, fit, budget, capacity);
      grow_blocks(s, fit + spec.lookahead);
      emit_row(s, fit, spec, plan, budget);
      return true;
    }
    Sequence* victim = youngest_unscheduled();
    if (victim == nullptr) return false;
    preempt(*victim, plan.released);
    if (victim == &s) return false;
  }
}

void Scheduler::schedule_waiting(StepPlan& plan, uint32_t& budget) {
  while (budget > 0 && !waiting_.empty()) {
    if (!try_admit(*waiting_.front(), plan, budget)) return;  // FCFS: the head blocks
  }
}

// Admits the head of the queue if a slot and the blocks of its first chunk are free,
// starting after the longest usable cached prefix.
bool Scheduler::try_admit(Sequence& s, StepPlan& plan, uint32_t& budget) {
  if (running_.size() >= config_.max_seqs || slots_.num_free() == 0) return false;
  PrefixHit hit;
  if (cache_enabled()) {
    prefix_.extend_hashes(s.cache_tokens(), s.hashes);
    // At least one token must be computed to get logits, so never hit the whole prompt; prompt
    // logprobs need every prompt row computed (the request still publishes its blocks).
    if (!s.sampling.prompt_logprobs) hit = prefix_.lookup(s.cache_tokens(), s.hashes, s.num_tokens() - 1);
  }
  uint32_t start = hit.num_tokens;
  set_snapshot_target(s, start);
  uint32_t end = chunk_end(s, start, budget);
  // Cached blocks nobody references sit in the free pool; taking them shrinks it.
  auto revived = static_cast<uint32_t>(
      std::count_if(hit.blocks.begin(), hit.blocks.end(), [&](uint32_t b) { return blocks_.ref_count(b) == 0; }));
  uint32_t reserve = running_.empty() ? 0 : config_.watermark_blocks;
  uint32_t free = blocks_.num_free();
  if (free < revived + reserve) return false;
  const uint32_t capacity = capacity_end(hit.blocks.size(), free - revived - reserve);
  uint32_t fit = std::min(end, capacity);
  if (fit <= start) return false;

  waiting_.pop_front();
  for (uint32_t b : hit.blocks) blocks_.ref(b);
  s.blocks = hit.blocks;
  s.published_blocks = static_cast<uint32_t>(s.blocks.size());
  s.num_computed = start;
  s.load_snapshot = hit.snapshot;
  if (s.num_preemptions == 0) {
    s.cached_tokens = start;
    counters_.prefix_queried_tokens += s.prompt_len;
    counters_.prefix_hit_tokens += start;
  }
  s.slot = slots_.acquire();
  running_.push_back(&s);
  const RowSpec spec = plan_speculation(s, fit, budget, capacity);
  grow_blocks(s, fit + spec.lookahead);
  emit_row(s, fit, spec, plan, budget);
  return true;
}

// End of the next chunk: as far as the budget allows, but never past the snapshot target
// (the state must be saved exactly there), and a chunk that stops before the end of the
// sequence stops on a block boundary so later snapshots land on reusable positions.
uint32_t Scheduler::chunk_end(const Sequence& s, uint32_t start, uint32_t budget) const {
  uint32_t end = std::min(s.num_tokens(), start + budget);
  if (s.snapshot_target > start && end > s.snapshot_target) return s.snapshot_target;
  if (end < s.num_tokens()) {
    uint32_t aligned = end / config_.block_size * config_.block_size;
    if (aligned > start) end = aligned;
  }
  return end;
}

uint32_t Scheduler::capacity_end(size_t held_blocks, uint32_t free_blocks) const {
  return static_cast<uint32_t>((held_blocks + free_blocks) * config_.block_size);
}

// Speculation of a row [num_computed, end). A row that ends the sequence (it has logits) verifies
// the pending drafts and asks for spec_k new ones; its blocks must then also cover the MTP draft
// rows, up to end + n_draft + spec_k - 1 when every draft is accepted. Drafts and lookahead
// shrink to the budget (each draft is a row), the context and the blocks to be had, down to a
// plain row. A chunk without logits only marks the sequence as speculating (MTP catch-up).
Scheduler::RowSpec Scheduler::plan_speculation(const Sequence& s, uint32_t end, uint32_t budget,
                                               uint32_t capacity) const {
  RowSpec r;
  if (config_.spec_k == 0 || s.sampling.prompt_logprobs) return r;  // forced prompt rows do not verify
  if (end < s.num_tokens()) {
    r.spec_k = config_.spec_k;
    return r;
  }
  const uint32_t room = std::min(config_.max_context, capacity) - end;  // end <= both
  const uint32_t row = end - s.num_computed;
  const auto pending = s.num_computed + 1 == end ? static_cast<uint32_t>(s.drafts.size()) : 0u;
  r.n_draft = std::min({pending, budget - std::min(budget, row), room, config_.spec_k});
  r.spec_k = std::min(config_.spec_k, room - r.n_draft);
  r.lookahead = r.n_draft + r.spec_k;
  return r;
}

void Scheduler::grow_blocks(Sequence& s, uint32_t end) {
  while (s.blocks.size() * config_.block_size < end) {
    auto b = blocks_.allocate();
    if (!b) throw std::logic_error("block allocation after a successful capacity check");
    s.blocks.push_back(*b);
  }
}

void Scheduler::emit_row(Sequence& s, uint32_t end, const RowSpec& spec, StepPlan& plan, uint32_t& budget) {
  uint32_t start = s.num_computed;
  ScheduledSeq row;
  row.request_id = s.request_id;
  row.state_slot = *s.slot;
  row.is_new = !s.sent_to_workers;
  if (row.is_new) row.load_snapshot = std::exchange(s.load_snapshot, std::nullopt);
  row.block_ids.assign(s.blocks.begin() + (row.is_new ? 0 : s.blocks_sent), s.blocks.end());
  row.start_pos = start;
  if (row.is_new && start > 0 && s.sampling.penalizes()) row.history.assign(s.tokens.begin(), s.tokens.begin() + start);
  row.token_ids.assign(s.tokens.begin() + start, s.tokens.begin() + end);
  for (const ImageSpan& im : s.images) {
    if (im.first_pos < end) row.images.push_back(im);
  }
  row.needs_logits = end == s.num_tokens();
  row.prompt_rows = s.sampling.prompt_logprobs && start + 1 < s.prompt_len && s.generated() == 0;
  row.token_ids.insert(row.token_ids.end(), s.drafts.begin(), s.drafts.begin() + spec.n_draft);
  row.n_draft = spec.n_draft;
  row.spec_k = spec.spec_k;
  row.rewind = std::exchange(s.rewind, false);
  // The state after a row with drafts may hold rejected positions: no snapshot of it.
  if (spec.n_draft == 0) row.save_snapshot = plan_snapshot(s, start, end);
  s.verifying = spec.n_draft;
  s.blocks_sent = static_cast<uint32_t>(s.blocks.size());
  s.sent_to_workers = true;
  s.num_computed = end;
  budget -= end - start + spec.n_draft;
  scheduled_.insert(s.uid);
  building_.rows.emplace_back(s.request_id, s.uid);
  plan.seqs.push_back(std::move(row));
}

// Snapshot when a row ends on the sequence's target (end of its last full prompt block),
// or, while generating, on a block boundary. Only the latest generation snapshot of a
// sequence is kept: it is the one a follow-up turn can reuse.
std::optional<uint32_t> Scheduler::plan_snapshot(Sequence& s, uint32_t start, uint32_t end) {
  if (!cache_enabled() || config_.stateless || end % config_.block_size != 0) return std::nullopt;
  bool at_target = end == s.snapshot_target;
  bool generating = config_.snapshot_decode && start >= s.prompt_len;
  if (!at_target && !generating) return std::nullopt;
  if (at_target) s.snapshot_target = 0;
  prefix_.extend_hashes(s.cache_tokens(), s.hashes);
  uint64_t key = s.hashes[end / config_.block_size - 1];
  auto id = snapshots_.reserve(key);
  if (!id) return std::nullopt;
  building_.pending_snapshots.push_back(*id);
  if (!at_target) {
    if (s.decode_snapshot_key) snapshots_.erase(*s.decode_snapshot_key);
    s.decode_snapshot_key = key;
  }
  return id;
}

// The last block boundary strictly before the end: a snapshot exactly at the end could
// not serve a resend of the same prompt (one token must always be computed for logits).
void Scheduler::set_snapshot_target(Sequence& s, uint32_t start) {
  s.snapshot_target = 0;
  if (!cache_enabled() || config_.stateless) return;
  uint32_t target = (s.num_tokens() - 1) / config_.block_size * config_.block_size;
  if (target <= start) return;
  if (snapshots_.contains(s.hashes[target / config_.block_size - 1])) return;
  s.snapshot_target = target;
}

// The youngest running sequence not in this plan, or nullptr when that one is in a step in
// flight: its row is being computed, so the caller waits for its result (the next plan may
// preempt it) rather than preempt an older sequence. With one step in flight at a time there
// is always a victim: the sequence asking is itself a candidate.
Sequence* Scheduler::youngest_unscheduled() {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (scheduled_.count((*it)->uid) != 0) continue;
    return busy_.count((*it)->uid) != 0 ? nullptr : *it;
  }
  if (in_flight_.empty()) throw std::logic_error("no sequence to preempt");
  return nullptr;
}

void Scheduler::preempt(Sequence& s, std::vector<ReleasedSeq>& released) {
  free_resources(s, released);
  remove_running(s);
  s.num_computed = 0;
  s.blocks_sent = 0;
  s.published_blocks = 0;
  s.sent_to_workers = false;
  s.load_snapshot.reset();
  s.snapshot_target = 0;
  // The re-prefill's last row samples afresh; its drafts come after it.
  s.drafts.clear();
  s.verifying = 0;
  s.rewind = false;
  ++s.num_preemptions;
  ++counters_.preemptions;
  waiting_.push_front(&s);
}

}  // namespace ds
