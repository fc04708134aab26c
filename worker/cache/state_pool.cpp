// GDN state slots and snapshots (see state_pool.h).
#include "worker/cache/state_pool.h"

#include "worker/backend.h"

namespace ds {

StatePool::StatePool(Backend& backend, size_t n_gdn_layers, size_t conv_floats, size_t ssm_floats)
    : be_(backend), conv_(conv_floats), ssm_(ssm_floats), record_(n_gdn_layers * (conv_floats + ssm_floats)) {}

StatePool::~StatePool() {
  be_.release(slots_.ptr);
  be_.release(snapshots_.ptr);
  be_.release(captures_.ptr);
}

void StatePool::grow(Buffer& b, size_t n) {
  if (n <= b.count) return;
  if (record_ > 0) {                        // a stage without GDN layers keeps no state, only the slot count
    float* grown = be_.alloc(n * record_);  // zero-filled
    if (b.ptr != nullptr) {
      be_.copy(grown, b.ptr, b.count * record_);
      be_.release(b.ptr);
    }
    b.ptr = grown;
  }
  b.count = n;
}

void StatePool::reserve_slots(size_t n) {
  grow(slots_, n);
}
void StatePool::reserve_snapshots(size_t n) {
  grow(snapshots_, n);
}

void StatePool::reset(uint32_t slot) {
  if (record_ > 0) be_.zero(slots_.ptr + slot * record_, record_);
}

void StatePool::save(uint32_t slot, uint32_t snapshot) {
  if (record_ > 0) be_.copy(snapshots_.ptr + snapshot * record_, slots_.ptr + slot * record_, record_);
}

void StatePool::load(uint32_t snapshot, uint32_t slot) {
  if (record_ > 0) be_.copy(slots_.ptr + slot * record_, snapshots_.ptr + snapshot * record_, record_);
}

}  // namespace ds

namespace ds {

void StatePool::reserve_captures(size_t slots) {
  grow(captures_, slots * kMaxCaptures);
}

void StatePool::capture_conv(uint32_t slot, uint32_t j, size_t gdn_layer) {
  if (record_ > 0) be_.copy(capture_layer(slot, j, gdn_layer), conv(slot, gdn_layer), conv_);
}

void StatePool::capture_ssm(uint32_t slot, uint32_t j, size_t gdn_layer) {
  if (record_ > 0) be_.copy(capture_layer(slot, j, gdn_layer) + conv_, ssm(slot, gdn_layer), ssm_);
}

void StatePool::restore(uint32_t j, uint32_t slot) {
  if (record_ > 0) be_.copy(slots_.ptr + slot * record_, captures_.ptr + (slot * kMaxCaptures + j) * record_, record_);
}

}  // namespace ds
