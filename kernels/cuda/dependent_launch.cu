#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/device_info.h"

namespace ds::cuda {
namespace {

// The streams switched on, as a fixed table of handles: a decode step asks ~300 times, so the
// lookup is lock-free (acquire loads over a few slots); only switching takes the mutex. A handful
// of streams are ever on (one per backend); past kSlots more streams stay off, which is always
// correct (ordinary launches), only slower.
constexpr size_t kSlots = 64;
constexpr uintptr_t kEmpty = UINTPTR_MAX;  // no stream handle (nullptr is the legacy default stream)

struct Registry {
  std::mutex switching;
  std::array<std::atomic<uintptr_t>, kSlots> on;
  std::atomic<size_t> used{0};  // slots [0, used) may hold a stream
  Registry() {
    for (std::atomic<uintptr_t>& s : on) s.store(kEmpty, std::memory_order_relaxed);
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

uintptr_t key(cudaStream_t s) {
  return reinterpret_cast<uintptr_t>(s);
}

}  // namespace

void set_dependent_launches(cudaStream_t stream, bool on) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.switching);
  const size_t used = r.used.load(std::memory_order_relaxed);
  size_t free_slot = kSlots;
  for (size_t i = 0; i < used; ++i) {
    const uintptr_t k = r.on[i].load(std::memory_order_relaxed);
    if (k == key(stream)) {
      if (!on) r.on[i].store(kEmpty, std::memory_order_release);
      return;
    }
    if (k == kEmpty && free_slot == kSlots) free_slot = i;
  }
  if (!on) return;
  if (free_slot == kSlots && used < kSlots) {
    free_slot = used;
    r.on[free_slot].store(key(stream), std::memory_order_release);
    r.used.store(used + 1, std::memory_order_release);
    return;
  }
  if (free_slot < kSlots) r.on[free_slot].store(key(stream), std::memory_order_release);
}

bool dependent_launches(cudaStream_t stream) {
  Registry& r = registry();
  const size_t used = r.used.load(std::memory_order_acquire);
  for (size_t i = 0; i < used; ++i) {
    if (r.on[i].load(std::memory_order_acquire) == key(stream)) return current_device_is_sm90_or_newer();
  }
  return false;
}

}  // namespace ds::cuda
