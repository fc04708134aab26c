// The worker's heartbeat: a thread with its own control connection that reports liveness and
// progress every period, independent of compute, so a long step or a slice load never looks
// like a dead worker, while a killed or stopped process goes silent at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "common/ipc/channel.h"

namespace ds {

// Progress of the main loop, written by it and read by the heartbeat thread.
struct WorkerStats {
  std::atomic<uint64_t> steps_done{0};
  std::atomic<int64_t> busy_since_ms{0};  // steady-clock ms when the current step began; 0 = idle
  std::atomic<uint32_t> n_sequences{0};
};

class HeartbeatThread {
 public:
  HeartbeatThread(ipc::Context& ctx, std::string endpoint, uint32_t rank, uint64_t instance_id, int period_ms,
                  const WorkerStats& stats);
  ~HeartbeatThread();
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;

 private:
  void loop();

  ipc::Context& ctx_;
  std::string endpoint_;
  uint32_t rank_;
  uint64_t instance_id_;
  int period_ms_;
  const WorkerStats& stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

int64_t steady_now_ms();

}  // namespace ds
