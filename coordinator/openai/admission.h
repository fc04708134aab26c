// The front door of the generation routes: admission control counted atomically, and the
// hand-over of a request's handling from an HTTP I/O thread to the request threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "coordinator/http/http_types.h"

namespace ds::openai {

// Requests between the door and Engine::submit (parsing, rendering, tokenizing) are counted
// here, so simultaneous arrivals see each other: checking only the engine's queue, which they
// join later, admitted every one of 300 requests sent at once against a limit of 256.
class AdmissionGate {
 public:
  // A ticket while `engine_waiting` plus those entering stays within `max_waiting` (0: no
  // limit), else null.
  // The request is counted until its ticket is dropped, after it has been submitted (briefly
  // counted twice then: the engine already queues it), or rejected.
  std::shared_ptr<void> try_enter(uint32_t engine_waiting, uint32_t max_waiting);
  uint32_t entering() const { return entering_.load(); }

 private:
  std::atomic<uint32_t> entering_{0};
};

// The disconnect hook of a request whose handler runs later on another thread: the client may
// leave before the handler runs (it is then skipped), while it runs, or after it returned its
// own hook (which is then called).
class DeferredHook {
 public:
  // The hook to hand to the HTTP session now.
  static DisconnectHook make(const std::shared_ptr<DeferredHook>& self);
  // False when the client already left (the handler need not run).
  bool wanted() const;
  // The handler's hook, once it returned; called at once if the client left meanwhile.
  void set(DisconnectHook hook);

 private:
  void client_left();

  mutable std::mutex mu_;
  bool gone_ = false;
  DisconnectHook hook_;
};

}  // namespace ds::openai
