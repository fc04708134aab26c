// A CacheGeometry from its four pool sizes (KV block size, KV blocks, GDN state slots, GDN
// snapshots), for tests that write many of them; the other fields keep their defaults.
#pragma once

#include <cstdint>

#include "worker/stage_model.h"

namespace ds::test {

inline CacheGeometry cache_geometry(uint32_t block_size, uint32_t blocks, uint32_t slots, uint32_t snapshots) {
  CacheGeometry g;
  g.block_size = block_size;
  g.num_blocks = blocks;
  g.max_seqs = slots;
  g.num_snapshots = snapshots;
  return g;
}

}  // namespace ds::test
