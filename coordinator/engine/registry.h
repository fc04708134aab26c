// Worker registry: what the coordinator knows about each rank — its current process instance,
// routing id, lifecycle state and when it was last heard from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/ipc/protocol.h"

namespace ds {

enum class WorkerState {
  kAbsent,    // no Hello from a live instance yet (never started, or lost)
  kAssigned,  // Hello received, Assign sent, waiting for Ready
  kReady,     // serving
  kFailed,    // answered Ready with ok = false
};
const char* worker_state_name(WorkerState state);

struct WorkerEntry {
  WorkerState state = WorkerState::kAbsent;
  std::string peer;          // ROUTER routing id of the control connection
  uint64_t instance_id = 0;  // current process instance (0 = none)
  uint32_t pid = 0;
  std::string hostname;
  uint32_t generation = 0;   // bumped whenever the rank's state is lost (death, restart)
  int64_t last_seen_ms = 0;  // steady clock
  ipc::v1::Hello hello;
  ipc::v1::Ready ready;
};

class WorkerRegistry {
 public:
  explicit WorkerRegistry(uint32_t n_ranks) : entries_(n_ranks) {}

  uint32_t size() const { return static_cast<uint32_t>(entries_.size()); }
  const WorkerEntry& at(uint32_t rank) const { return entries_[rank]; }

  // A Hello from a new instance of `rank` replaces the old one. Returns true when the rank's
  // previous instance was live (its state is lost).
  bool on_hello(const ipc::v1::Hello& hello, const std::string& peer, int64_t now_ms);
  // Records a Ready of the current instance. Returns false when it is stale.
  bool on_ready(const ipc::v1::Ready& ready, uint64_t instance_id, int64_t now_ms);
  // Refreshes last_seen for the current instance of `rank`.
  void touch(uint32_t rank, uint64_t instance_id, int64_t now_ms);
  // Forgets the rank's instance (it died or was declared dead).
  void mark_lost(uint32_t rank);
  // Ranks whose current instance has not been heard from for `timeout_ms`.
  std::vector<uint32_t> silent_ranks(int64_t now_ms, int64_t timeout_ms) const;

  bool all_ready() const;
  bool all_said_hello() const;
  std::vector<uint32_t> generations() const;

 private:
  std::vector<WorkerEntry> entries_;
};

}  // namespace ds
