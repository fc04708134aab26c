// How many KV blocks, GDN state slots and snapshots a stage allocates from a memory budget.
// Pure arithmetic (no backend, no allocation), so the policy is unit-tested on its own; the
// worker's loader (worker/daemon/stage_loader.cpp) supplies the budget and allocates the
// result once, at load.
//
// Policy (CACHE_SIZING_FIT_BUDGET; the request's numbers are upper bounds):
//  1. keep every state slot asked for, unless the slots, their snapshots and the KV blocks of
//     one max_context sequence (min_blocks) do not fit: then as many slots as fit that way
//     (snapshots keep their share per slot), at least one;
//  2. give every remaining byte to KV blocks, up to the bound.
// A speculating server's slot also holds `captures_per_slot` GDN rollback records
// (StatePool::kMaxCaptures when Assign.spec_k > 0), so a slot costs 1 + captures_per_slot state
// records in both steps; snapshots hold none.
// CACHE_SIZING_EXACT allocates exactly the request, or fails with what fits instead.
#pragma once

#include <cstdint>

#include "common/stage_types.h"

namespace ds {

struct ModelConfig;

// Bytes of one pool element across every layer the stage runs.
struct PoolCosts {
  uint64_t kv_block_bytes = 0;      // one KV block: K + V rows of every attention pool (MTP included)
  uint64_t state_record_bytes = 0;  // one GDN state slot or snapshot: conv + recurrent state of every GDN layer
};

// The costs of the stage [first_layer, last_layer) of `config` with KV blocks of
// geometry.block_size rows stored as geometry.k_type / v_type, f32 GDN state (the last stage
// also runs the MTP block, which has its own KV pool).
PoolCosts stage_pool_costs(const ModelConfig& config, uint32_t first_layer, uint32_t last_layer,
                           const CacheGeometry& geometry);

// Bytes the pools of `geometry` take, captures included (saturates at UINT64_MAX instead of wrapping).
uint64_t pool_bytes(const PoolCosts& costs, const CacheGeometry& geometry);

struct PoolRequest {
  CacheGeometry limit;      // block_size, captures_per_slot are exact; the counts are exact or upper bounds
  uint32_t min_blocks = 0;  // fit: fewest KV blocks worth serving (one max_context sequence)
  bool exact = false;       // allocate exactly `limit`, or throw
};

struct PoolSizing {
  CacheGeometry geometry;  // what to allocate
  uint64_t bytes = 0;      // pool_bytes(costs, geometry)
};

// Sizes managed pools (limit.num_blocks > 0) within `budget_bytes`. Throws ConfigError with
// the numbers (needed, budget, what would fit) when even the minimum does not fit, or when
// the request itself is malformed (no slots, no block bound, a zero block size).
PoolSizing size_pools(const PoolCosts& costs, const PoolRequest& request, uint64_t budget_bytes);

// Whether memory taken from the pools' budget before they are sized (the CUDA worker's
// persistent bf16 weight copy) costs them nothing: the pools sized from `budget_with_extra`
// (what is left once the extra bytes are set aside) equal those sized from `budget_bytes`, i.e.
// the request's bounds, not the memory, limited them. False when either sizing fails.
bool fits_beside_pools(const PoolCosts& costs, const PoolRequest& request, uint64_t budget_bytes,
                       uint64_t budget_with_extra);

}  // namespace ds
