// GDN state slots: one per live sequence. Ids index the workers' per-slot conv and
// recurrent state buffers; the lowest free id is reused first (keeps ids dense).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <stdexcept>
#include <vector>

namespace ds {

class SlotPool {
 public:
  explicit SlotPool(uint32_t num_slots) : used_(num_slots, false) {
    for (uint32_t s = 0; s < num_slots; ++s) free_.push(s);
  }
  uint32_t num_free() const { return static_cast<uint32_t>(free_.size()); }
  uint32_t capacity() const { return static_cast<uint32_t>(used_.size()); }
  bool in_use(uint32_t slot) const { return used_.at(slot); }

  std::optional<uint32_t> acquire() {
    if (free_.empty()) return std::nullopt;
    uint32_t s = free_.top();
    free_.pop();
    used_[s] = true;
    return s;
  }
  void release(uint32_t slot) {
    if (!used_.at(slot)) throw std::logic_error("release of a free state slot");
    used_[slot] = false;
    free_.push(slot);
  }

 private:
  std::vector<bool> used_;
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> free_;
};

}  // namespace ds
