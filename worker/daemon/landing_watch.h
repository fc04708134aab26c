// Watches a hidden chunk that lands after its descriptor (ShmSlot.lands_later): the previous
// stage sent the descriptor as soon as its work was queued, and this stage's device (or host)
// waits on the slot's ready word. If the previous stage dies first, that word is never set and
// the wait would never end: the watch then sets the word itself, so the wait ends and the step
// runs on garbage, and reports that it did, so the worker fails the step instead of sending the
// garbage on (the coordinator recovers as for any lost worker).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "common/host_signal.h"

namespace ds {

class LandingWatch {
 public:
  // `producer_alive(pid)`: whether the producer still runs (default: process_alive, kill(pid, 0);
  // an unknown pid <= 0 leaves only the deadline). `deadline`:
  // the longest a chunk may take to land with a live producer (a stuck device).
  explicit LandingWatch(std::chrono::milliseconds deadline = std::chrono::seconds(30),
                        std::function<bool(int64_t)> producer_alive = {});
  ~LandingWatch();
  LandingWatch(const LandingWatch&) = delete;
  LandingWatch& operator=(const LandingWatch&) = delete;

  // Starts watching `ready` (one chunk at a time: a new arm replaces the last).
  void arm(const HostSignal& ready, int64_t producer_pid);
  // Stops watching. True when the watch had to set the word itself: the bytes never landed.
  bool disarm();

 private:
  void loop();

  std::chrono::milliseconds deadline_;
  std::function<bool(int64_t)> producer_alive_;
  std::mutex mu_;
  std::condition_variable cv_;
  HostSignal ready_;  // armed when ready_.word != nullptr
  int64_t producer_pid_ = 0;
  std::chrono::steady_clock::time_point armed_at_;
  bool forced_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ds
