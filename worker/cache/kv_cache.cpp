// KV pools (see kv_cache.h).
#include "worker/cache/kv_cache.h"

#include "worker/backend.h"

namespace ds {

KvCache::KvCache(Backend& backend, size_t n_layers, size_t block_size, size_t row_floats)
    : be_(backend), block_size_(block_size), row_floats_(row_floats), k_(n_layers, nullptr), v_(n_layers, nullptr) {}

KvCache::~KvCache() {
  for (float* p : k_) be_.release(p);
  for (float* p : v_) be_.release(p);
}

// Growth copies the old pool into the front of the new one: block b keeps its rows.
void KvCache::reserve(size_t n_blocks) {
  if (n_blocks <= capacity_) return;
  const size_t old_floats = capacity_ * block_size_ * row_floats_;
  const size_t new_floats = n_blocks * block_size_ * row_floats_;
  for (std::vector<float*>* pools : {&k_, &v_}) {
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
  return 2 * k_.size() * capacity_ * block_size_ * row_floats_ * sizeof(float);
}

}  // namespace ds
