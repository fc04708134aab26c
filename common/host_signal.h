// A 32-bit word in host memory that says "these bytes are in place" once it holds `value`:
// the ready word of a hidden-state ring slot (common/ipc/shm_ring.h), which the stage that fills
// the slot may set from its device after the descriptor has gone out, and the next stage may wait
// on from its own device (worker/backend.h: download_signalled, wait_host_signal).
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

namespace ds {

struct HostSignal {
  uint32_t* word = nullptr;
  uint32_t value = 0;  // never 0, a word's reset state

  explicit operator bool() const { return word != nullptr; }
  // Acquire load: what the setter wrote before setting is visible.
  bool landed() const { return __atomic_load_n(word, __ATOMIC_ACQUIRE) == value; }
  // Release store: what this thread wrote before is visible to whoever sees the word set.
  void set() const { __atomic_store_n(word, value, __ATOMIC_RELEASE); }
  // Blocks this thread until the word is set: spins briefly (a hop's bytes land within
  // microseconds of the descriptor on a CPU producer), then naps. No deadline of its own: a
  // worker arms a LandingWatch, which sets the word itself when the producer dies.
  void wait() const {
    for (int attempt = 0; !landed(); ++attempt) {
      if (attempt < 256) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
};

}  // namespace ds
