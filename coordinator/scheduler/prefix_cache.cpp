#include "coordinator/scheduler/prefix_cache.h"

namespace ds {
namespace {

// splitmix64 finalizer: cheap, well mixed; collisions are caught by the token compare.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent);
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

std::vector<int32_t> image_key_tokens(std::span<const int32_t> tokens, const std::vector<ImageSpan>& images,
                                      uint64_t seed) {
  std::vector<int32_t> keys(tokens.begin(), tokens.end());
  for (const ImageSpan& im : images) {
    const uint64_t image_key = mix(seed ^ mix(im.hash));
    for (uint32_t i = 0; i < im.n_tokens() && uint64_t{im.first_pos} + i < keys.size(); ++i) {
      keys[im.first_pos + i] = -1 - static_cast<int32_t>(mix(image_key + i) & 0x7fffffffu);
    }
  }
  return keys;
}

PrefixCache::PrefixCache(BlockAllocator& blocks, SnapshotStore& snapshots, uint64_t seed, bool stateless)
    : blocks_(blocks), snapshots_(snapshots), seed_(seed), stateless_(stateless) {}

void PrefixCache::extend_hashes(std::span<const int32_t> tokens, std::vector<uint64_t>& hashes) const {
  size_t full = tokens.size() / block_size();
  while (hashes.size() < full) {
    size_t k = hashes.size();
    hashes.push_back(hash_block(parent_hash(hashes, k), block_tokens(tokens, k)));
  }
}

PrefixHit PrefixCache::lookup(std::span<const int32_t> tokens, const std::vector<uint64_t>& hashes, uint32_t limit) {
  PrefixHit hit;
  std::vector<uint32_t> chain;
  std::optional<uint32_t> snapshot;
  size_t usable_blocks = 0;
  for (size_t k = 0; k < hashes.size() && (k + 1) * block_size() <= limit; ++k) {
    auto block = blocks_.lookup(hashes[k], parent_hash(hashes, k), block_tokens(tokens, k));
    if (!block) break;
    chain.push_back(*block);
    if (stateless_) {
      usable_blocks = k + 1;
      continue;
    }
    // Only the deepest snapshot matters; touching shallower ones on the way is harmless
    // (they are prefixes of what was just asked for, hence likely useful again).
    if (auto s = snapshots_.find(hashes[k])) {
      snapshot = s;
      usable_blocks = k + 1;
    }
  }
  if (usable_blocks == 0) return hit;
  chain.resize(usable_blocks);
  hit.num_tokens = static_cast<uint32_t>(usable_blocks * block_size());
  hit.blocks = std::move(chain);
  hit.snapshot = snapshot;
  return hit;
}

void PrefixCache::publish(std::span<const int32_t> tokens, const std::vector<uint64_t>& hashes,
                          const std::vector<uint32_t>& block_table, size_t first, size_t last) {
  for (size_t k = first; k < last; ++k) {
    blocks_.publish(block_table[k], hashes[k], parent_hash(hashes, k), block_tokens(tokens, k));
  }
}

}  // namespace ds
