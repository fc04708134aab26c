#include "coordinator/scheduler/snapshot_store.h"

#include <stdexcept>

namespace ds {

SnapshotStore::SnapshotStore(uint32_t capacity) : entries_(capacity) {
  for (uint32_t id = capacity; id > 0; --id) free_ids_.push_back(id - 1);
}

std::optional<uint32_t> SnapshotStore::find(uint64_t key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  Entry& e = entries_[it->second];
  if (e.state != State::kReady) return std::nullopt;
  lru_.splice(lru_.end(), lru_, e.lru_pos);
  return it->second;
}

std::optional<uint32_t> SnapshotStore::reserve(uint64_t key) {
  if (contains(key)) return std::nullopt;
  if (free_ids_.empty()) {
    if (lru_.empty()) return std::nullopt;
    drop(lru_.front());
    ++evictions_;
  }
  uint32_t id = free_ids_.back();
  free_ids_.pop_back();
  entries_[id] = Entry{State::kPending, key, {}};
  by_key_.emplace(key, id);
  return id;
}

void SnapshotStore::commit(uint32_t id) {
  Entry& e = entries_.at(id);
  if (e.state != State::kPending) throw std::logic_error("commit of a snapshot not pending");
  e.state = State::kReady;
  e.lru_pos = lru_.insert(lru_.end(), id);
}

void SnapshotStore::erase(uint64_t key) {
  auto it = by_key_.find(key);
  if (it != by_key_.end()) drop(it->second);
}

void SnapshotStore::drop(uint32_t id) {
  Entry& e = entries_[id];
  if (e.state == State::kReady) lru_.erase(e.lru_pos);
  by_key_.erase(e.key);
  e = Entry{};
  free_ids_.push_back(id);
}

void SnapshotStore::clear() {
  for (uint32_t id = 0; id < entries_.size(); ++id) {
    if (entries_[id].state != State::kFree) drop(id);
  }
}

std::string SnapshotStore::check_invariants() const {
  size_t used = 0;
  size_t ready = 0;
  for (uint32_t id = 0; id < entries_.size(); ++id) {
    const Entry& e = entries_[id];
    if (e.state == State::kFree) continue;
    ++used;
    ready += e.state == State::kReady;
    auto it = by_key_.find(e.key);
    if (it == by_key_.end() || it->second != id) return "snapshot key map out of sync";
  }
  if (used != by_key_.size()) return "snapshot key map has stale entries";
  if (used + free_ids_.size() != entries_.size()) return "snapshot ids leaked";
  if (ready != lru_.size()) return "snapshot LRU list out of sync";
  return {};
}

}  // namespace ds
