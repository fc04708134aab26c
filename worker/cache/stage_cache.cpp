// Sequence placement on a stage's pools (see stage_cache.h).
#include "worker/cache/stage_cache.h"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_set>

#include "common/error.h"
#include "kernels/cpu/attention.h"  // kv_pool_row: the one row -> page mapping

namespace ds {
namespace {

// Self-managed pools start this small and double, so tools pay only for what they use.
constexpr size_t kFirstBlocks = 16;
constexpr size_t kFirstSlots = 4;

std::string who(const SeqStep& s) {
  return "sequence " + std::to_string(s.seq_id);
}

}  // namespace

StageCache::StageCache(Backend& backend, const CacheGeometry& geometry, const CacheShapes& shapes)
    : geo_(geometry),
      kv_(backend, shapes.n_attention_layers, geometry.block_size, shapes.kv_row_floats, geometry.k_type,
          geometry.v_type),
      states_(backend, shapes.n_gdn_layers, shapes.conv_floats, shapes.ssm_floats),
      stateless_(shapes.n_gdn_layers == 0) {
  if (geo_.block_size == 0) throw ConfigError("KV block size must be positive");
  if (!geo_.managed()) return;
  if (geo_.max_seqs == 0) throw ConfigError("scheduler-managed memory needs at least one state slot");
  // Pool rows travel as uint32 and block ids as int32 (the attention op's table type).
  if (uint64_t{geo_.num_blocks} * geo_.block_size > uint64_t{std::numeric_limits<int32_t>::max()}) {
    throw ConfigError("KV pool of " + std::to_string(geo_.num_blocks) + " blocks of " +
                      std::to_string(geo_.block_size) + " rows is too large");
  }
  kv_.reserve(geo_.num_blocks);
  states_.reserve_slots(geo_.max_seqs);
  states_.reserve_snapshots(geo_.num_snapshots);
  // Sized into the budget by pool_sizing (Assign.spec_k > 0): allocated now, not mid-serving.
  if (geo_.captures_per_slot != 0 && geo_.captures_per_slot != StatePool::kMaxCaptures) {
    throw ConfigError("GDN rollback records come " + std::to_string(StatePool::kMaxCaptures) + " per state slot, not " +
                      std::to_string(geo_.captures_per_slot));
  }
  if (geo_.captures_per_slot > 0) states_.reserve_captures(geo_.max_seqs);
  snapshot_pos_.assign(geo_.num_snapshots, -1);
}

// ---- checks (nothing changes until every row passed) ---------------------------------------

void StageCache::check_step(const StepInput& in) const {
  if (geo_.managed() == in.cache.empty()) {
    throw ConfigError(geo_.managed()
                          ? "this stage's memory is placed by the scheduler: the step must name state slots and blocks"
                          : "this stage places sequences itself: the step must not name state slots or blocks");
  }
  if (!geo_.managed()) {
    for (const SeqStep& s : in.seqs) check_self_managed_row(s);
    return;
  }
  if (in.cache.size() != in.seqs.size()) throw ConfigError("step names placements for a different number of sequences");
  std::unordered_set<uint32_t> slots;
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    check_managed_row(in.seqs[i], in.cache[i]);
    if (!slots.insert(in.cache[i].state_slot).second) {
      throw ConfigError("two sequences of one step use state slot " + std::to_string(in.cache[i].state_slot));
    }
  }
}

void StageCache::check_self_managed_row(const SeqStep& s) const {
  const auto it = seqs_.find(s.seq_id);
  if (it != seqs_.end()) {
    if (s.start_pos != 0 || s.rewind) check_continues(s, it->second);
    return;
  }
  if (s.start_pos != 0 || s.rewind) {
    throw ConfigError(who(s) + ": step starts at position " + std::to_string(s.start_pos) +
                      " but the stage holds 0 positions");
  }
}

// A running sequence continues where it stopped, or (rewind) at a position one of its GDN
// captures holds exactly: anything else would compute from a wrong state.
void StageCache::check_continues(const SeqStep& step, const Seq& s) const {
  if (step.n_draft > StatePool::kMaxCaptures || step.n_draft >= step.n_tokens()) {
    throw ConfigError(who(step) + ": " + std::to_string(step.n_draft) + " drafts in a row of " +
                      std::to_string(step.n_tokens()) + " tokens");
  }
  if (!step.rewind) {
    if (step.start_pos != s.n_past) {
      throw ConfigError(who(step) + ": step starts at position " + std::to_string(step.start_pos) +
                        " but the stage holds " + std::to_string(s.n_past) + " positions");
    }
    return;
  }
  if (step.start_pos < s.capture_first || step.start_pos >= s.capture_first + s.n_captures ||
      step.start_pos >= s.n_past) {
    throw ConfigError(who(step) + ": cannot rewind to position " + std::to_string(step.start_pos) +
                      " (no captured state there)");
  }
}

void StageCache::check_managed_row(const SeqStep& s, const SeqCache& c) const {
  if (c.state_slot >= geo_.max_seqs) {
    throw ConfigError(who(s) + ": state slot " + std::to_string(c.state_slot) + " outside the " +
                      std::to_string(geo_.max_seqs) + " slots");
  }
  for (const auto& snap : {c.load_snapshot, c.save_snapshot}) {
    if (snap && *snap >= geo_.num_snapshots) {
      throw ConfigError(who(s) + ": snapshot " + std::to_string(*snap) + " outside the " +
                        std::to_string(geo_.num_snapshots) + " snapshot buffers");
    }
  }
  for (uint32_t b : c.block_ids) {
    if (b >= geo_.num_blocks) throw ConfigError(who(s) + ": KV block " + std::to_string(b) + " outside the pool");
  }
  size_t table_blocks = c.block_ids.size();
  if (c.is_new) {
    // A snapshot holds the state after exactly the positions it was saved at; the step must
    // continue from there (anything else would silently compute from a wrong state).
    const int64_t want = c.load_snapshot ? snapshot_pos_[*c.load_snapshot] : 0;
    if (want < 0) throw ConfigError(who(s) + ": snapshot " + std::to_string(*c.load_snapshot) + " was never saved");
    if (s.rewind) throw ConfigError(who(s) + ": a new sequence cannot rewind");
    // Without recurrent layers there is no state to restore: a new sequence may start after a
    // cached prefix whose KV blocks its table shares.
    const bool stateless = stateless_ && !c.load_snapshot;
    if (s.start_pos != want && !stateless) {
      throw ConfigError(who(s) + ": new sequence starts at position " + std::to_string(s.start_pos) + " but its " +
                        (c.load_snapshot ? "snapshot holds " : "zero state holds ") + std::to_string(want));
    }
    const auto owner = slot_owner_.find(c.state_slot);
    if (owner != slot_owner_.end() && owner->second != s.seq_id) {
      throw ConfigError(who(s) + ": state slot " + std::to_string(c.state_slot) + " is held by sequence " +
                        std::to_string(owner->second));
    }
  } else {
    if (c.load_snapshot) throw ConfigError(who(s) + ": only a new sequence can load a snapshot");
    const auto it = seqs_.find(s.seq_id);
    if (it == seqs_.end()) throw ConfigError(who(s) + " is not new and not placed on this stage");
    if (it->second.slot != c.state_slot) {
      throw ConfigError(who(s) + ": state slot " + std::to_string(c.state_slot) + " differs from its slot " +
                        std::to_string(it->second.slot));
    }
    check_continues(s, it->second);
    table_blocks += it->second.table.size();
  }
  const size_t need = size_t{s.start_pos} + s.n_tokens();
  if (table_blocks * geo_.block_size < need) {
    throw ConfigError(who(s) + ": block table covers " + std::to_string(table_blocks * geo_.block_size) +
                      " positions, the step needs " + std::to_string(need));
  }
}

// ---- applying a step -------------------------------------------------------------------------

std::vector<StageCache::Seq*> StageCache::begin_step(const StepInput& in) {
  std::vector<Seq*> out;
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    out.push_back(geo_.managed() ? &place_managed(in.seqs[i], in.cache[i]) : &place_self_managed(in.seqs[i]));
    apply_speculation(in.seqs[i], *out.back());
  }
  return out;
}

// Rewind first (it reads the previous step's captures), then note where this step's
// captures will land (the model writes them while it computes the draft rows).
void StageCache::apply_speculation(const SeqStep& step, Seq& s) {
  if (step.rewind) {
    states_.restore(step.start_pos - s.capture_first, s.slot);
    s.n_past = step.start_pos;
  }
  s.n_captures = step.n_draft;
  s.capture_first = step.start_pos + step.n_tokens() - step.n_draft;
  if (step.n_draft > 0 && states_.capture_slots() <= s.slot) {
    states_.reserve_captures(std::max<size_t>(states_.slots(), size_t{s.slot} + 1));
  }
}

StageCache::Seq& StageCache::place_managed(const SeqStep& step, const SeqCache& c) {
  if (!c.is_new) {
    Seq& s = seqs_.at(step.seq_id);
    s.table.insert(s.table.end(), c.block_ids.begin(), c.block_ids.end());
    return s;
  }
  drop(step.seq_id);  // a re-placement (after preemption) replaces the old one
  Seq& s = seqs_[step.seq_id];
  s.slot = c.state_slot;
  s.table.assign(c.block_ids.begin(), c.block_ids.end());
  s.n_past = step.start_pos;
  // A prefix-cache hit shares blocks whose MTP rows the earlier owner wrote (when it
  // speculated; else they are stale, which only lowers draft quality, never the output).
  s.mtp_n_past = step.start_pos;
  slot_owner_[c.state_slot] = step.seq_id;
  if (c.load_snapshot) {
    states_.load(*c.load_snapshot, s.slot);
  } else {
    states_.reset(s.slot);
  }
  return s;
}

StageCache::Seq& StageCache::place_self_managed(const SeqStep& step) {
  auto [it, inserted] = seqs_.try_emplace(step.seq_id);
  Seq& s = it->second;
  if (inserted) s.slot = take_slot();
  if (inserted || (step.start_pos == 0 && !step.rewind)) {  // restart: zero state, forget cached rows
    states_.reset(s.slot);
    s.n_past = 0;
  }
  cover(s, size_t{step.start_pos} + step.n_tokens());
  return s;
}

void StageCache::end_step(const StepInput& in) {
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    Seq& s = seqs_.at(in.seqs[i].seq_id);
    s.n_past = in.seqs[i].start_pos + in.seqs[i].n_tokens();
    if (geo_.managed() && in.cache[i].save_snapshot) {
      const uint32_t snap = *in.cache[i].save_snapshot;
      states_.save(s.slot, snap);
      snapshot_pos_[snap] = s.n_past;
    }
  }
}

StageCache::Seq& StageCache::begin_mtp(uint64_t seq_id, uint32_t start_pos, size_t n_tokens) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) {
    if (geo_.managed()) throw ConfigError("MTP step for sequence " + std::to_string(seq_id) + ", which is not placed");
    it = seqs_.try_emplace(seq_id).first;
    it->second.slot = take_slot();
    states_.reset(it->second.slot);
  }
  Seq& s = it->second;
  if (start_pos > s.mtp_n_past) {
    throw ConfigError("MTP step for sequence " + std::to_string(seq_id) + " starts at " + std::to_string(start_pos) +
                      " but the MTP cache holds " + std::to_string(s.mtp_n_past));
  }
  const size_t need = size_t{start_pos} + n_tokens;
  if (!geo_.managed()) {
    cover(s, need);
  } else if (s.table.size() * geo_.block_size < need) {
    throw ConfigError("MTP step for sequence " + std::to_string(seq_id) + " goes past its block table");
  }
  return s;
}

void StageCache::append_pool_rows(const Seq& s, uint32_t start_pos, size_t n, std::vector<uint32_t>* rows) const {
  for (size_t p = start_pos; p < start_pos + n; ++p) {
    rows->push_back(static_cast<uint32_t>(cpu::kv_pool_row(s.table.data(), geo_.block_size, p)));
  }
}

// ---- dropping ----------------------------------------------------------------------------------

void StageCache::drop(uint64_t seq_id) {
  const auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  if (geo_.managed()) {
    const auto owner = slot_owner_.find(it->second.slot);
    if (owner != slot_owner_.end() && owner->second == seq_id) slot_owner_.erase(owner);
  } else {
    free_self_managed(it->second);
  }
  seqs_.erase(it);
}

void StageCache::drop_all() {
  while (!seqs_.empty()) drop(seqs_.begin()->first);
  std::fill(snapshot_pos_.begin(), snapshot_pos_.end(), -1);
}

// ---- self-managed allocation -------------------------------------------------------------------

void StageCache::cover(Seq& s, size_t rows) {
  while (s.table.size() * geo_.block_size < rows) {
    if (!free_blocks_.empty()) {
      s.table.push_back(free_blocks_.back());
      free_blocks_.pop_back();
      continue;
    }
    s.table.push_back(static_cast<int32_t>(blocks_used_++));
    if (blocks_used_ > kv_.capacity()) kv_.reserve(std::max({size_t{blocks_used_}, 2 * kv_.capacity(), kFirstBlocks}));
  }
}

uint32_t StageCache::take_slot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  const uint32_t slot = slots_used_++;
  if (slots_used_ > states_.slots())
    states_.reserve_slots(std::max({size_t{slots_used_}, 2 * states_.slots(), kFirstSlots}));
  return slot;
}

void StageCache::free_self_managed(Seq& s) {
  free_blocks_.insert(free_blocks_.end(), s.table.begin(), s.table.end());
  free_slots_.push_back(s.slot);
}

}  // namespace ds
