// KV pools (see kv_cache.h).
#include "worker/cache/kv_cache.h"

#include "worker/backend.h"

namespace ds {

KvCache::KvCache(Backend& backend, size_t n_layers, size_t block_size, size_t row_values, KvType k_type, KvType v_type)
    : be_(backend),
      block_size_(block_size),
      row_values_(row_values),
      k_type_(k_type),
      v_type_(v_type),
      k_(n_layers, nullptr),
      v_(n_layers, nullptr) {}

KvCache::~KvCache() {
  for (float* p : k_) be_.release(p);
  for (float* p : v_) be_.release(p);
}

// Growth copies the old pool into the front of the new one: block b keeps its rows. Rows are a
// multiple of 16 bytes (kv_type_problem), so a pool is a whole number of floats.
void KvCache::reserve(size_t n_blocks) {
  if (n_blocks <= capacity_) return;
  for (auto [pools, type] : {std::pair{&k_, k_type_}, std::pair{&v_, v_type_}}) {
    const size_t row_floats = kv_row_bytes(type, row_values_) / sizeof(float);
    const size_t old_floats = capacity_ * block_size_ * row_floats;
    const size_t new_floats = n_blocks * block_size_ * row_floats;
    for (float*& pool : *pools) {
      float* grown = be_.alloc(new_floats);  // zero-filled
      if (pool != nullptr) {
        be_.copy(grown, pool, old_floats);
        be_.release(pool);
      }
      pool = grown;
    }
  }
  capacity_ = n_blocks;
}

size_t KvCache::bytes() const {
  const size_t rows = capacity_ * block_size_;
  return k_.size() * rows * (kv_row_bytes(k_type_, row_values_) + kv_row_bytes(v_type_, row_values_));
}

}  // namespace ds
