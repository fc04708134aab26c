// The KV pools of one stage: for every full-attention layer it runs (the MTP block's attention
// counts as one more layer), a K pool and a V pool of [blocks][block_size] rows on the backend's
// device, each row n_kv_heads * head_dim values encoded as the pool's KvType (common/kv_format.h). Sequences own no
// memory here: their block tables (worker/cache/stage_cache.h) say which blocks hold their rows, and the attention op
// reads through those tables.
#pragma once

#include <cstddef>
#include <vector>

#include "common/kv_format.h"

namespace ds {

class Backend;

class KvCache {
 public:
  // `row_values` = n_kv_heads * head_dim. No memory is taken until reserve().
  KvCache(Backend& backend, size_t n_layers, size_t block_size, size_t row_values, KvType k_type, KvType v_type);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Grows every pool to hold at least n_blocks blocks, keeping the contents (block ids stay
  // valid). Pool pointers change when it grows.
  void reserve(size_t n_blocks);

  size_t n_layers() const { return k_.size(); }
  size_t capacity() const { return capacity_; }  // blocks per pool
  size_t block_size() const { return block_size_; }
  size_t row_values() const { return row_values_; }
  KvType k_type() const { return k_type_; }
  KvType v_type() const { return v_type_; }
  size_t bytes() const;  // all pools together
  void* k(size_t layer) { return k_[layer]; }
  void* v(size_t layer) { return v_[layer]; }

 private:
  Backend& be_;
  size_t block_size_;
  size_t row_values_;
  KvType k_type_, v_type_;
  size_t capacity_ = 0;
  std::vector<float*> k_, v_;  // allocated as floats (Backend::alloc), holding encoded rows
};

}  // namespace ds
