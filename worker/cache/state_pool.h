// The GDN states of one stage: per state slot, the conv window and the recurrent state of every
// GDN layer the stage runs, plus snapshot buffers of exactly the same shape. A slot is one
// contiguous record [layer 0 conv | layer 0 ssm | layer 1 conv | ...], so a snapshot save or
// load is a single device copy per stage.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds {

class Backend;

class StatePool {
 public:
  // conv_floats / ssm_floats: per GDN layer ((Kc-1)*C and nv*dk*dv). No memory until reserve.
  StatePool(Backend& backend, size_t n_gdn_layers, size_t conv_floats, size_t ssm_floats);
  ~StatePool();
  StatePool(const StatePool&) = delete;
  StatePool& operator=(const StatePool&) = delete;

  // Grow to at least n slots / snapshots, keeping the contents (ids stay valid).
  void reserve_slots(size_t n);
  void reserve_snapshots(size_t n);

  size_t slots() const { return slots_.count; }
  size_t snapshots() const { return snapshots_.count; }
  size_t record_floats() const { return record_; }  // one slot, all GDN layers
  size_t bytes() const { return (slots_.count + snapshots_.count + captures_.count) * record_ * sizeof(float); }

  float* conv(uint32_t slot, size_t gdn_layer) { return slots_.ptr + slot * record_ + gdn_layer * per_layer(); }
  float* ssm(uint32_t slot, size_t gdn_layer) { return conv(slot, gdn_layer) + conv_; }

  void reset(uint32_t slot);                    // zero state: a sequence starting at position 0
  void save(uint32_t slot, uint32_t snapshot);  // snapshot <- slot
  void load(uint32_t snapshot, uint32_t slot);  // slot <- snapshot

  // Speculative decoding: per slot, kMaxCaptures records of per-position state written while
  // the drafts of a verify step run (capture j = the state after verify row j), so the next
  // step can roll the slot back to any accepted position without recomputing. A server that
  // speculates reserves them with its pools at load (CacheGeometry::captures_per_slot, counted
  // in pool_sizing); otherwise they grow on first use, so tools that never speculate pay nothing.
  static constexpr size_t kMaxCaptures = 4;
  void reserve_captures(size_t slots);  // capture records for slots [0, slots)
  size_t capture_slots() const { return captures_.count / kMaxCaptures; }
  // One GDN layer's part of a capture record (same layout as a slot record).
  float* capture_layer(uint32_t slot, uint32_t j, size_t gdn_layer) {
    return captures_.ptr + (slot * kMaxCaptures + j) * record_ + gdn_layer * per_layer();
  }
  // Capture j's conv window / recurrent state of one layer <- the slot's (the model runs a
  // layer's conv for all rows before its recurrence, so the two are captured separately).
  void capture_conv(uint32_t slot, uint32_t j, size_t gdn_layer);
  void capture_ssm(uint32_t slot, uint32_t j, size_t gdn_layer);
  // Where capture j keeps one layer's recurrent state; capture j + 1's is record_floats() further.
  float* capture_ssm_at(uint32_t slot, uint32_t j, size_t gdn_layer) {
    return capture_layer(slot, j, gdn_layer) + conv_;
  }
  void restore(uint32_t j, uint32_t slot);  // slot <- capture j (all layers)

 private:
  struct Buffer {
    float* ptr = nullptr;
    size_t count = 0;  // records
  };
  size_t per_layer() const { return conv_ + ssm_; }
  void grow(Buffer& b, size_t n);

  Backend& be_;
  size_t conv_, ssm_, record_;
  Buffer slots_, snapshots_, captures_;
};

}  // namespace ds
