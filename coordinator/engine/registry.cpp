// Worker registry (see registry.h).
#include "coordinator/engine/registry.h"

namespace ds {

const char* worker_state_name(WorkerState state) {
  switch (state) {
    case WorkerState::kAbsent:
      return "absent";
    case WorkerState::kAssigned:
      return "loading";
    case WorkerState::kReady:
      return "ready";
    case WorkerState::kFailed:
      return "failed";
  }
  return "?";
}

bool WorkerRegistry::on_hello(const ipc::v1::Hello& hello, const std::string& peer, int64_t now_ms) {
  WorkerEntry& e = entries_[hello.rank()];
  const bool lost = e.instance_id != 0;
  if (lost) ++e.generation;
  e.state = WorkerState::kAssigned;
  e.peer = peer;
  e.instance_id = hello.instance_id();
  e.pid = hello.pid();
  e.hostname = hello.hostname();
  e.last_seen_ms = now_ms;
  e.hello = hello;
  e.ready.Clear();
  return lost;
}

bool WorkerRegistry::on_ready(const ipc::v1::Ready& ready, uint64_t instance_id, int64_t now_ms) {
  if (ready.rank() >= entries_.size()) return false;
  WorkerEntry& e = entries_[ready.rank()];
  if (e.instance_id != instance_id || e.state != WorkerState::kAssigned) return false;
  e.state = ready.ok() ? WorkerState::kReady : WorkerState::kFailed;
  e.ready = ready;
  e.last_seen_ms = now_ms;
  return true;
}

void WorkerRegistry::touch(uint32_t rank, uint64_t instance_id, int64_t now_ms) {
  if (rank < entries_.size() && entries_[rank].instance_id == instance_id && instance_id != 0) {
    entries_[rank].last_seen_ms = now_ms;
  }
}

void WorkerRegistry::mark_lost(uint32_t rank) {
  WorkerEntry& e = entries_[rank];
  if (e.instance_id != 0) ++e.generation;
  e.state = WorkerState::kAbsent;
  e.instance_id = 0;
  e.pid = 0;
  e.peer.clear();
}

std::vector<uint32_t> WorkerRegistry::silent_ranks(int64_t now_ms, int64_t timeout_ms) const {
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < entries_.size(); ++r) {
    const WorkerEntry& e = entries_[r];
    if (e.instance_id != 0 && now_ms - e.last_seen_ms > timeout_ms) out.push_back(r);
  }
  return out;
}

bool WorkerRegistry::all_ready() const {
  for (const WorkerEntry& e : entries_) {
    if (e.state != WorkerState::kReady) return false;
  }
  return true;
}

bool WorkerRegistry::all_said_hello() const {
  for (const WorkerEntry& e : entries_) {
    if (e.hostname.empty()) return false;
  }
  return true;
}

std::vector<uint32_t> WorkerRegistry::generations() const {
  std::vector<uint32_t> g;
  for (const WorkerEntry& e : entries_) g.push_back(e.generation);
  return g;
}

}  // namespace ds
