// Hybrid prefix cache, coordinator side. Full-attention KV blocks are content-addressed
// (chained hash of (parent hash, block tokens)); GDN layers have no per-token state to
// reuse, only the state after a whole prefix. So a cached prefix is usable only up to a
// position where both hold: every KV block before it is cached, and a GDN snapshot was
// kept at exactly that position. See README.md for the design.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/image_span.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/scheduler/snapshot_store.h"

namespace ds {

// Hash of one full block chained onto the hash of everything before it.
uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens);

// The ids a sequence with images is keyed by in the cache: `tokens` with the token at index i of
// an image (all of them the same <|image_pad|> id) replaced by a negative id mixed from `seed`, the
// image's content hash and i. Blocks and snapshots are then keyed by token ids plus image content:
// the same image at the same place hits, another image (same pad tokens) misses, and no real token
// (ids >= 0) equals an image id. Positions past `tokens` are ignored.
std::vector<int32_t> image_key_tokens(std::span<const int32_t> tokens, const std::vector<ImageSpan>& images,
                                      uint64_t seed);

struct PrefixHit {
  uint32_t num_tokens = 0;           // block-aligned, 0 = miss
  std::vector<uint32_t> blocks;      // cached KV blocks covering [0, num_tokens)
  std::optional<uint32_t> snapshot;  // GDN state at num_tokens (set iff num_tokens > 0, unless stateless)
};

class PrefixCache {
 public:
  // `seed` keys the hash chain; a per-process random seed keeps hash collisions from being
  // crafted by clients (lookups also compare tokens, but the chain relies on the hash).
  // `stateless`: the model has no recurrent layers, so a hit may end at any cached block and
  // needs no snapshot.
  PrefixCache(BlockAllocator& blocks, SnapshotStore& snapshots, uint64_t seed, bool stateless = false);

  uint32_t block_size() const { return blocks_.block_size(); }
  // Hash of block k's parent: the seed for the first block.
  uint64_t parent_hash(const std::vector<uint64_t>& hashes, size_t k) const { return k == 0 ? seed_ : hashes[k - 1]; }
  // Extends `hashes` to one entry per full block of `tokens` (kept per sequence).
  void extend_hashes(std::span<const int32_t> tokens, std::vector<uint64_t>& hashes) const;

  // Longest usable cached prefix of at most `limit` tokens. Marks the snapshot as used.
  // Does not take references: the caller refs the blocks when it commits to the hit.
  PrefixHit lookup(std::span<const int32_t> tokens, const std::vector<uint64_t>& hashes, uint32_t limit);

  // Publishes blocks [first, last) of a sequence whose KV is now computed.
  void publish(std::span<const int32_t> tokens, const std::vector<uint64_t>& hashes,
               const std::vector<uint32_t>& block_table, size_t first, size_t last);

 private:
  std::span<const int32_t> block_tokens(std::span<const int32_t> tokens, size_t k) const {
    return tokens.subspan(k * block_size(), block_size());
  }

  BlockAllocator& blocks_;
  SnapshotStore& snapshots_;
  uint64_t seed_;
  bool stateless_;
};

}  // namespace ds
