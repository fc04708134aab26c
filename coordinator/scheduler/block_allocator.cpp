#include "coordinator/scheduler/block_allocator.h"

#include <algorithm>
#include <stdexcept>

namespace ds {

BlockAllocator::BlockAllocator(uint32_t num_blocks, uint32_t block_size)
    : block_size_(block_size), blocks_(num_blocks) {
  if (block_size == 0) throw std::invalid_argument("block_size must be positive");
  for (uint32_t b = 0; b < num_blocks; ++b) push_free(b);
}

// Uncached blocks go to the front so that cached content survives as long as possible;
// cached blocks go to the back, which makes the free list an LRU order for eviction.
void BlockAllocator::push_free(uint32_t block) {
  Block& b = blocks_[block];
  b.free_pos = b.hash ? free_.insert(free_.end(), block) : free_.insert(free_.begin(), block);
  b.in_free_list = true;
}

std::optional<uint32_t> BlockAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  uint32_t id = free_.front();
  free_.pop_front();
  Block& b = blocks_[id];
  b.in_free_list = false;
  if (b.hash) {
    ++evictions_;
    unpublish(id);
  }
  b.ref_count = 1;
  return id;
}

void BlockAllocator::ref(uint32_t block) {
  Block& b = blocks_.at(block);
  if (b.ref_count == 0) {
    if (!b.in_free_list) throw std::logic_error("ref of a block in no state");
    free_.erase(b.free_pos);
    b.in_free_list = false;
  }
  ++b.ref_count;
}

void BlockAllocator::release(uint32_t block) {
  Block& b = blocks_.at(block);
  if (b.ref_count == 0) throw std::logic_error("release of a free block");
  if (--b.ref_count == 0) push_free(block);
}

bool BlockAllocator::publish(uint32_t block, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) {
  Block& b = blocks_.at(block);
  if (b.hash || by_hash_.count(hash) != 0) return false;
  b.hash = hash;
  b.parent = parent;
  b.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, block);
  return true;
}

std::optional<uint32_t> BlockAllocator::lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const Block& b = blocks_[it->second];
  if (b.parent != parent || !std::equal(tokens.begin(), tokens.end(), b.tokens.begin(), b.tokens.end())) {
    return std::nullopt;  // 64-bit hash collision: treat as a miss
  }
  return it->second;
}

void BlockAllocator::unpublish(uint32_t block) {
  Block& b = blocks_[block];
  by_hash_.erase(*b.hash);
  b.hash.reset();
  b.tokens.clear();
}

void BlockAllocator::clear_cache() {
  for (uint32_t id = 0; id < blocks_.size(); ++id) {
    if (!blocks_[id].hash) continue;
    unpublish(id);
    if (blocks_[id].in_free_list) {  // now uncached: move to the front
      free_.erase(blocks_[id].free_pos);
      push_free(id);
    }
  }
}

std::string BlockAllocator::check_invariants() const {
  std::vector<int> seen(blocks_.size(), 0);
  for (uint32_t id : free_) {
    if (id >= blocks_.size()) return "free list holds an invalid id";
    if (seen[id]++) return "block " + std::to_string(id) + " twice in the free list";
    if (blocks_[id].ref_count != 0) return "block " + std::to_string(id) + " free and used";
  }
  for (uint32_t id = 0; id < blocks_.size(); ++id) {
    const Block& b = blocks_[id];
    if (b.in_free_list != (seen[id] == 1)) return "free flag of block " + std::to_string(id);
    if (b.ref_count == 0 && !b.in_free_list) return "block " + std::to_string(id) + " leaked";
    if (b.hash) {
      auto it = by_hash_.find(*b.hash);
      if (it == by_hash_.end() || it->second != id) return "hash map misses a block";
    }
  }
  for (const auto& [hash, id] : by_hash_) {
    if (blocks_[id].hash != hash) return "hash map points to a block with other content";
  }
  return {};
}

}  // namespace ds
