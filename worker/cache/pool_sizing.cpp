// Pool sizing from a memory budget (see pool_sizing.h).
#include "worker/cache/pool_sizing.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/byte_size.h"
#include "common/error.h"
#include "common/kv_options.h"  // kv_types_name
#include "common/model_config.h"
#include "common/stage_footprint.h"

namespace ds {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kMax : r;
}

uint64_t add_sat(uint64_t a, uint64_t b) {
  return a > kMax - b ? kMax : a + b;
}

// Block ids travel as int32 and pool rows as uint32 (stage_cache.cpp checks the same bound).
uint32_t max_blocks_for(uint32_t block_size) {
  return static_cast<uint32_t>(uint64_t{std::numeric_limits<int32_t>::max()} / block_size);
}

std::string describe(const CacheGeometry& g) {
  return std::to_string(g.num_blocks) + " KV blocks of " + std::to_string(g.block_size) + " tokens (" +
         kv_types_name(g.k_type, g.v_type) + "), " + std::to_string(g.max_seqs) + " state slots" +
         (g.captures_per_slot ? " with " + std::to_string(g.captures_per_slot) + " speculation rollback records each"
                              : "") +
         ", " + std::to_string(g.num_snapshots) + " snapshots";
}

// Snapshots keep their share per slot when slots shrink (2 per slot stays 2 per slot).
uint32_t snapshots_for(const CacheGeometry& limit, uint32_t slots) {
  return static_cast<uint32_t>(uint64_t{limit.num_snapshots} * slots / limit.max_seqs);
}

// A slot is its live state plus its speculation rollback records; a snapshot is one record.
uint64_t state_bytes(const PoolCosts& c, uint64_t slots, uint64_t snapshots, uint32_t captures_per_slot) {
  const uint64_t records = add_sat(mul_sat(slots, add_sat(1, captures_per_slot)), snapshots);
  return mul_sat(records, c.state_record_bytes);
}

// KV blocks the bytes left after the state pools buy, capped by `bound`.
uint32_t blocks_within(const PoolCosts& c, uint64_t left, uint32_t bound) {
  if (c.kv_block_bytes == 0) return bound;  // a stage without attention layers holds any block id
  return static_cast<uint32_t>(std::min<uint64_t>(bound, left / c.kv_block_bytes));
}

void check_request(const PoolRequest& r) {
  const CacheGeometry& g = r.limit;
  if (g.block_size == 0) throw ConfigError("KV block size must be positive");
  if (g.num_blocks == 0) throw ConfigError("pool sizing needs a KV block count (the bound, or the exact number)");
  if (g.max_seqs == 0) throw ConfigError("pool sizing needs at least one state slot");
  if (g.num_blocks > max_blocks_for(g.block_size)) {
    throw ConfigError(std::to_string(g.num_blocks) + " KV blocks of " + std::to_string(g.block_size) +
                      " rows exceed the 2^31 pool rows block tables can address");
  }
}

PoolSizing exact_pools(const PoolCosts& c, const CacheGeometry& g, uint64_t budget) {
  const uint64_t need = pool_bytes(c, g);
  if (need > budget) {
    const uint64_t state = state_bytes(c, g.max_seqs, g.num_snapshots, g.captures_per_slot);
    const uint32_t fit = state > budget ? 0 : blocks_within(c, budget - state, g.num_blocks);
    throw ConfigError("the pools (" + describe(g) + ") need " + format_bytes(need) + " but the memory budget is " +
                      format_bytes(budget) + ": with these slots and snapshots only " + std::to_string(fit) +
                      " KV blocks fit");
  }
  return PoolSizing{g, need};
}

}  // namespace

// The stage's state per sequence (common/stage_footprint.h, which the model allocates from too)
// in bytes: K and V rows of every attention layer per KV block (as their types store them), one
// record of every GDN layer.
PoolCosts stage_pool_costs(const ModelConfig& cfg, uint32_t first, uint32_t last, const CacheGeometry& g) {
  const CacheShapes s = stage_cache_shapes(cfg, StageRange{first, last});
  PoolCosts c;
  c.kv_block_bytes = uint64_t{g.block_size} * kv_bytes_per_token(s, g.k_type, g.v_type);
  c.state_record_bytes = uint64_t{s.n_gdn_layers} * (s.conv_floats + s.ssm_floats) * sizeof(float);
  return c;
}

uint64_t pool_bytes(const PoolCosts& c, const CacheGeometry& g) {
  return add_sat(mul_sat(g.num_blocks, c.kv_block_bytes),
                 state_bytes(c, g.max_seqs, g.num_snapshots, g.captures_per_slot));
}

PoolSizing size_pools(const PoolCosts& c, const PoolRequest& r, uint64_t budget) {
  check_request(r);
  const CacheGeometry& limit = r.limit;
  if (r.exact) return exact_pools(c, limit, budget);
  const uint32_t min_blocks = std::clamp<uint32_t>(r.min_blocks, 1, limit.num_blocks);
  const uint64_t min_kv = mul_sat(min_blocks, c.kv_block_bytes);
  auto slot_state = [&](uint32_t slots) {
    return state_bytes(c, slots, snapshots_for(limit, slots), limit.captures_per_slot);
  };
  auto fits = [&](uint32_t slots) { return add_sat(slot_state(slots), min_kv) <= budget; };
  if (!fits(1)) {
    throw ConfigError("the memory budget of " + format_bytes(budget) + " cannot hold one sequence: one state slot " +
                      "and " + std::to_string(min_blocks) + " KV blocks of " +
                      kv_types_name(limit.k_type, limit.v_type) + " (one max_context sequence) need " +
                      format_bytes(add_sat(slot_state(1), min_kv)) +
                      " (raise the budget, lower --max-context, use a smaller --kv-cache-type, or spread the layers "
                      "over more workers)");
  }
  // The largest slot count that fits (fits() is monotone in the slot count).
  uint32_t lo = 1, hi = limit.max_seqs;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  PoolSizing out;
  out.geometry = limit;
  out.geometry.max_seqs = lo;
  out.geometry.num_snapshots = snapshots_for(limit, lo);
  const uint64_t state = slot_state(lo);
  out.geometry.num_blocks = blocks_within(c, budget - state, limit.num_blocks);
  out.bytes = pool_bytes(c, out.geometry);
  return out;
}

bool fits_beside_pools(const PoolCosts& c, const PoolRequest& r, uint64_t budget, uint64_t budget_with_extra) {
  try {
    return size_pools(c, r, budget_with_extra).geometry == size_pools(c, r, budget).geometry;
  } catch (const ConfigError&) {
    return false;  // the pools do not fit with the extra bytes set aside (or at all)
  }
}

}  // namespace ds
