// Paged KV block allocator for the full-attention layers. The coordinator owns the
// bookkeeping (ids, ref counts, content hashes); workers own the memory the ids index.
//
// A block is either referenced (ref_count > 0, owned by one or more sequences) or free.
// A free block may still hold published content (a full block of a finished or preempted
// sequence, addressed by its chained content hash): it stays reusable by a later prompt
// with the same prefix until it is allocated for new content, which evicts it. Free
// blocks without content are handed out first, then cached ones in LRU order.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace ds {

class BlockAllocator {
 public:
  BlockAllocator(uint32_t num_blocks, uint32_t block_size);

  uint32_t num_blocks() const { return static_cast<uint32_t>(blocks_.size()); }
  uint32_t block_size() const { return block_size_; }
  // Free blocks, including cached (evictable) ones.
  uint32_t num_free() const { return static_cast<uint32_t>(free_.size()); }
  uint32_t ref_count(uint32_t block) const { return blocks_.at(block).ref_count; }
  uint64_t num_evictions() const { return evictions_; }

  // Takes a free block (uncached first, else least recently freed) with ref_count 1.
  // Any cached content it held is dropped. nullopt when none is free.
  std::optional<uint32_t> allocate();
  // Adds a reference (prefix-cache hit). A free cached block leaves the free list.
  void ref(uint32_t block);
  // Drops a reference; at zero the block becomes free (keeping published content).
  void release(uint32_t block);

  // Makes a full block findable by its chained hash. `parent` and `tokens` are kept so a
  // lookup verifies content, not just the 64-bit hash. No-op (returns false) when another
  // block already holds this hash (a duplicate computed concurrently stays private).
  bool publish(uint32_t block, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);
  // The cached block with this hash whose parent hash and tokens match, if any.
  std::optional<uint32_t> lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const;
  // Forgets all published content (workers lost their KV memory).
  void clear_cache();

  // Empty when consistent; otherwise what is wrong (for tests and debug checks).
  std::string check_invariants() const;

 private:
  struct Block {
    uint32_t ref_count = 0;
    bool in_free_list = false;
    std::list<uint32_t>::iterator free_pos;
    std::optional<uint64_t> hash;  // set while the content is published
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
  };
  void unpublish(uint32_t block);
  void push_free(uint32_t block);

  uint32_t block_size_;
  std::vector<Block> blocks_;
  std::list<uint32_t> free_;  // front: allocated next (uncached first, then oldest cached)
  std::unordered_map<uint64_t, uint32_t> by_hash_;
  uint64_t evictions_ = 0;
};

}  // namespace ds
