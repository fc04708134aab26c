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
  size_t bytes() const { return (slots_.count + snapshots_.count) * record_ * sizeof(float); }

  float* conv(uint32_t slot, size_t gdn_layer) { return slots_.ptr + slot * record_ + gdn_layer * per_layer(); }
  float* ssm(uint32_t slot, size_t gdn_layer) { return conv(slot, gdn_layer) + conv_; }

  void reset(uint32_t slot);                    // zero state: a sequence starting at position 0
  void save(uint32_t slot, uint32_t snapshot);  // snapshot <- slot
  void load(uint32_t snapshot, uint32_t slot);  // slot <- snapshot

 private:
  struct Buffer {
    float* ptr = nullptr;
    size_t count = 0;  // records
  };
  size_t per_layer() const { return conv_ + ssm_; }
  void grow(Buffer& b, size_t n);

  Backend& be_;
  size_t conv_, ssm_, record_;
  Buffer slots_, snapshots_;
};

}  // namespace ds
