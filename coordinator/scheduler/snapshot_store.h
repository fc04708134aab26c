// GDN state snapshots for the hybrid prefix cache. A snapshot is a worker-side buffer
// (conv + recurrent state of every GDN layer) holding the state of some sequence after
// exactly the tokens of a block-aligned prefix. It is keyed by the chained hash of the
// last block of that prefix, so the key names the whole prefix content.
//
// Ids 0..capacity-1 index the workers' snapshot buffers. A reserved snapshot is pending
// until the step that saves it has completed: it is neither found nor evicted meanwhile.
// Ready snapshots are evicted least recently used first when a new one needs an id.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace ds {

class SnapshotStore {
 public:
  explicit SnapshotStore(uint32_t capacity);

  uint32_t capacity() const { return static_cast<uint32_t>(entries_.size()); }
  uint32_t size() const { return static_cast<uint32_t>(by_key_.size()); }
  uint64_t num_evictions() const { return evictions_; }

  // The ready snapshot for this prefix, marked most recently used.
  std::optional<uint32_t> find(uint64_t key);
  // Ready or pending.
  bool contains(uint64_t key) const { return by_key_.count(key) != 0; }
  // An id for a new pending snapshot of `key`, evicting the LRU ready one if full.
  // nullopt when the key is already present, capacity is 0 or every id is pending.
  std::optional<uint32_t> reserve(uint64_t key);
  // The save has happened: the snapshot becomes findable.
  void commit(uint32_t id);
  void erase(uint64_t key);
  void clear();

  std::string check_invariants() const;

 private:
  enum class State { kFree, kPending, kReady };
  struct Entry {
    State state = State::kFree;
    uint64_t key = 0;
    std::list<uint32_t>::iterator lru_pos;  // valid while ready
  };
  void drop(uint32_t id);

  std::vector<Entry> entries_;
  std::vector<uint32_t> free_ids_;
  std::list<uint32_t> lru_;  // ready ids, front = least recently used
  std::unordered_map<uint64_t, uint32_t> by_key_;
  uint64_t evictions_ = 0;
};

}  // namespace ds
