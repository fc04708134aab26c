// Pool sizing from a memory budget (worker/cache/pool_sizing.h) and byte-size option values.
// Every expected number is worked out by hand in the comment next to it; the arithmetic is
// integer, so the comparisons are exact.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "common/byte_size.h"
#include "common/error.h"
#include "common/model_config.h"
#include "tests/testutil/cache_geometry.h"
#include "worker/cache/pool_sizing.h"

namespace ds {
namespace {

using test::cache_geometry;

PoolRequest fit(const CacheGeometry& limit, uint32_t min_blocks) {
  PoolRequest r;
  r.limit = limit;
  r.min_blocks = min_blocks;
  return r;
}

std::string error_of(const PoolCosts& c, const PoolRequest& r, uint64_t budget) {
  try {
    size_pools(c, r, budget);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PoolSizing, AmpleBudgetGivesTheUpperBounds) {
  const PoolCosts c{1000, 100};
  const PoolSizing s = size_pools(c, fit(cache_geometry(16, 50, 4, 8), 10), 1'000'000'000);
  EXPECT_EQ(s.geometry, cache_geometry(16, 50, 4, 8));
  EXPECT_EQ(s.bytes, 50u * 1000 + 12u * 100);  // 51200
}

TEST(PoolSizing, BlocksTakeWhatTheStateLeaves) {
  const PoolCosts c{1000, 100};
  // state: (4 + 8) * 100 = 1200; blocks: (30000 - 1200) / 1000 = 28
  const PoolSizing s = size_pools(c, fit(cache_geometry(16, 50, 4, 8), 10), 30000);
  EXPECT_EQ(s.geometry, cache_geometry(16, 28, 4, 8));
  EXPECT_EQ(s.bytes, 28u * 1000 + 1200);
  EXPECT_LE(s.bytes, 30000u);
}

TEST(PoolSizing, SlotsShrinkOnlyWhenOneFullContextWouldNotFit) {
  const PoolCosts c{1000, 1000};
  // min KV = 10 blocks = 10000. s slots bring 2s snapshots: 3s * 1000.
  // s = 2: 6000 + 10000 = 16000 <= 17000; s = 3: 19000 > 17000.  blocks = (17000 - 6000) / 1000 = 11
  EXPECT_EQ(size_pools(c, fit(cache_geometry(16, 50, 4, 8), 10), 17000).geometry, cache_geometry(16, 11, 2, 4));
  // Exactly one slot (3000) + 10 blocks (10000).
  EXPECT_EQ(size_pools(c, fit(cache_geometry(16, 50, 4, 8), 10), 13000).geometry, cache_geometry(16, 10, 1, 2));
  // All 4 slots fit with the minimum: 12000 + 10000 = 22000 <= 22000, then no spare block.
  EXPECT_EQ(size_pools(c, fit(cache_geometry(16, 50, 4, 8), 10), 22000).geometry, cache_geometry(16, 10, 4, 8));
}

TEST(PoolSizing, SnapshotsKeepTheirShareWhenSlotsShrink) {
  const PoolCosts c{0, 1000};  // no attention layer: KV costs nothing
  // 3 slots, 2 snapshots; budget for 2 slots + floor(2 * 2 / 3) = 1 snapshot = 3000.
  EXPECT_EQ(size_pools(c, fit(cache_geometry(16, 50, 3, 2), 10), 3500).geometry, cache_geometry(16, 50, 2, 1));
}

TEST(PoolSizing, StageWithoutAttentionHoldsEveryBlockId) {
  const PoolCosts c{0, 100};
  const PoolSizing s = size_pools(c, fit(cache_geometry(16, 4096, 4, 8), 64), 1200);
  EXPECT_EQ(s.geometry.num_blocks, 4096u);
  EXPECT_EQ(s.bytes, 1200u);
}

TEST(PoolSizing, TooSmallForOneSequenceIsAClearError) {
  const PoolCosts c{1000, 1000};
  const std::string e = error_of(c, fit(cache_geometry(16, 50, 4, 8), 10), 12999);  // one sequence needs 13000
  EXPECT_NE(e.find("cannot hold one sequence"), std::string::npos) << e;
  EXPECT_NE(e.find("10 KV blocks"), std::string::npos) << e;
}

TEST(PoolSizing, MinimumIsCappedByTheBound) {
  const PoolCosts c{1000, 0};
  // min_blocks 100 > bound 20: one full context is the whole pool.
  EXPECT_EQ(size_pools(c, fit(cache_geometry(16, 20, 1, 0), 100), 20000).geometry, cache_geometry(16, 20, 1, 0));
  EXPECT_NE(error_of(c, fit(cache_geometry(16, 20, 1, 0), 100), 19999).find("cannot hold one sequence"),
            std::string::npos);
}

TEST(PoolSizing, ExactFitsOrSaysWhatWouldFit) {
  const PoolCosts c{1000, 100};
  PoolRequest r = fit(cache_geometry(16, 50, 4, 8), 10);
  r.exact = true;
  EXPECT_EQ(size_pools(c, r, 51200).geometry, cache_geometry(16, 50, 4, 8));
  // 30000 - 1200 of state leaves room for 28 blocks.
  const std::string e = error_of(c, r, 30000);
  EXPECT_NE(e.find("only 28 KV blocks fit"), std::string::npos) << e;
  EXPECT_NE(e.find("50 KV blocks"), std::string::npos) << e;
}

TEST(PoolSizing, MalformedRequestsAreRejected) {
  const PoolCosts c{1000, 100};
  EXPECT_NE(error_of(c, fit(cache_geometry(0, 50, 4, 8), 10), 1 << 30).find("block size"), std::string::npos);
  EXPECT_NE(error_of(c, fit(cache_geometry(16, 0, 4, 8), 10), 1 << 30).find("KV block count"), std::string::npos);
  EXPECT_NE(error_of(c, fit(cache_geometry(16, 50, 0, 8), 10), 1 << 30).find("state slot"), std::string::npos);
  // 2^31 rows / 16 = 134217728 blocks is one too many.
  EXPECT_NE(error_of(c, fit(cache_geometry(16, 134217728, 4, 8), 10), 1 << 30).find("2^31"), std::string::npos);
}

TEST(PoolSizing, HugeCostsSaturateInsteadOfWrapping) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  const PoolCosts c{max / 2, 1};
  EXPECT_EQ(pool_bytes(c, cache_geometry(16, 4, 1, 0)), max);
  PoolRequest r = fit(cache_geometry(16, 4, 1, 0), 1);
  r.exact = true;
  // Room left after the 1-byte state: max - 2 = 2^64 - 3, below 2 blocks (2 * (2^63 - 1) = 2^64 - 2).
  EXPECT_NE(error_of(c, r, max - 1).find("only 1 KV blocks fit"), std::string::npos);
}

// bf16-weight-copy=auto: the copy is kept only when the pools lose nothing to it.
TEST(PoolSizing, ExtraBytesFitBesidePoolsOnlyWhenThePoolsLoseNothing) {
  const PoolCosts c{1000, 100};
  const PoolRequest r = fit(cache_geometry(16, 50, 4, 8), 10);  // full pools: 51200 B (test above)
  EXPECT_TRUE(fits_beside_pools(c, r, 60000, 60000));
  EXPECT_TRUE(fits_beside_pools(c, r, 60000, 51200));   // every pool still at its bound
  EXPECT_FALSE(fits_beside_pools(c, r, 60000, 51199));  // one KV block fewer
  EXPECT_FALSE(fits_beside_pools(c, r, 60000, 0));      // nothing left for the pools
  EXPECT_FALSE(fits_beside_pools(c, r, 10000, 10000));  // one sequence (10 blocks + state) never fits
  PoolRequest exact = r;
  exact.exact = true;
  EXPECT_TRUE(fits_beside_pools(c, exact, 60000, 51200));
  EXPECT_FALSE(fits_beside_pools(c, exact, 60000, 51199));  // EXACT would fail: no copy
}

// Speculation (Assign.spec_k > 0): each slot also holds captures_per_slot rollback records.
CacheGeometry speculating(CacheGeometry g, uint32_t captures) {
  g.captures_per_slot = captures;
  return g;
}

TEST(PoolSizing, RollbackRecordsAreCountedPerSlot) {
  const PoolCosts c{1000, 100};
  // Ample: state (4 * (1 + 4) + 8) * 100 = 2800 on top of 50 blocks.
  const PoolSizing ample = size_pools(c, fit(speculating(cache_geometry(16, 50, 4, 8), 4), 10), 1'000'000'000);
  EXPECT_EQ(ample.geometry, speculating(cache_geometry(16, 50, 4, 8), 4));
  EXPECT_EQ(ample.bytes, 50u * 1000 + 2800);
  // 30000 B: the records leave (30000 - 2800) / 1000 = 27 blocks (28 without speculation).
  const PoolSizing tight = size_pools(c, fit(speculating(cache_geometry(16, 50, 4, 8), 4), 10), 30000);
  EXPECT_EQ(tight.geometry, speculating(cache_geometry(16, 27, 4, 8), 4));
  EXPECT_EQ(tight.bytes, 27u * 1000 + 2800);
  EXPECT_EQ(pool_bytes(c, tight.geometry), tight.bytes);
}

TEST(PoolSizing, RollbackRecordsCanCostSlots) {
  const PoolCosts c{1000, 1000};
  // 10 blocks (one context) = 10000; a slot with 4 records + its 2 snapshots = 7000.
  // 40000 B: (40000 - 10000) / 7000 -> 4 slots (without records: 3000 each -> all 8).
  const PoolSizing s = size_pools(c, fit(speculating(cache_geometry(16, 100, 8, 16), 4), 10), 40000);
  EXPECT_EQ(s.geometry.max_seqs, 4u);
  EXPECT_EQ(s.geometry.num_snapshots, 8u);
  EXPECT_EQ(s.geometry.num_blocks, (40000u - 4 * 7000) / 1000);  // 12
  EXPECT_EQ(size_pools(c, fit(cache_geometry(16, 100, 8, 16), 10), 40000).geometry.max_seqs, 8u);
  // Not even one speculating slot: 7000 + 10000 > 16000, though 3000 + 10000 fits.
  EXPECT_NE(
      error_of(c, fit(speculating(cache_geometry(16, 100, 8, 16), 4), 10), 16000).find("cannot hold one sequence"),
      std::string::npos);
  EXPECT_NO_THROW(size_pools(c, fit(cache_geometry(16, 100, 8, 16), 10), 16000));
}

TEST(PoolSizing, ExactCountsRollbackRecords) {
  const PoolCosts c{1000, 100};
  PoolRequest r = fit(speculating(cache_geometry(16, 20, 4, 8), 4), 10);
  r.exact = true;
  // 20 * 1000 + (4 * 5 + 8) * 100 = 22800.
  EXPECT_EQ(size_pools(c, r, 22800).bytes, 22800u);
  EXPECT_NE(error_of(c, r, 22799).find("only 19 KV blocks fit"), std::string::npos) << error_of(c, r, 22799);
}

// The tiny fixture's shapes: 2 KV heads of 64, conv kernel 4, 2 key groups of 32, 4 value heads of 32.
ModelConfig small_config() {
  ModelConfig cfg;
  cfg.n_layer = 4;
  cfg.n_nextn = 1;
  cfg.layer_kinds = {LayerKind::kLinearAttention, LayerKind::kLinearAttention, LayerKind::kLinearAttention,
                     LayerKind::kFullAttention};
  cfg.n_head_kv = 2;
  cfg.head_dim = 64;
  cfg.ssm_conv_kernel = 4;
  cfg.ssm_n_group = 2;
  cfg.ssm_d_state = 32;
  cfg.ssm_dt_rank = 4;
  cfg.ssm_d_inner = 128;
  return cfg;
}

TEST(PoolSizing, StageCostsCountTheStagesLayers) {
  const ModelConfig cfg = small_config();
  // Last stage [2, 4): GDN layer 2; attention layer 3 + the MTP pool.
  // KV block: 2 pools * (K + V) * 16 rows * 2 heads * 64 * 4 B = 32768.
  // State record: conv 3 * (2*2*32 + 128) = 768 floats + ssm 4 * 32 * 32 = 4096 floats = 19456 B.
  const PoolCosts last = stage_pool_costs(cfg, 2, 4, cache_geometry(16, 0, 0, 0));
  EXPECT_EQ(last.kv_block_bytes, 32768u);
  EXPECT_EQ(last.state_record_bytes, 19456u);
  // First stage [0, 2): two GDN layers, no attention, no MTP.
  const PoolCosts first = stage_pool_costs(cfg, 0, 2, cache_geometry(16, 0, 0, 0));
  EXPECT_EQ(first.kv_block_bytes, 0u);
  EXPECT_EQ(first.state_record_bytes, 2u * 19456);
}

CacheGeometry kv_typed(KvType k, KvType v) {
  CacheGeometry g = cache_geometry(16, 0, 0, 0);
  g.k_type = k;
  g.v_type = v;
  return g;
}

// 4 KV heads of 64: rows of 256 values, which every KV type can store (kv_type_problem).
ModelConfig four_kv_heads() {
  ModelConfig cfg = small_config();
  cfg.n_head_kv = 4;
  return cfg;
}

// A KV block costs what its rows' types store (kv_row_bytes), K and V each; the GDN state stays f32.
TEST(PoolSizing, StageCostsFollowTheKvTypes) {
  const ModelConfig cfg = four_kv_heads();
  // Last stage: 2 pools * 16 rows. q8_0: 256 + 8 scales * 2 B = 272 B a row: 2 * 16 * (272 + 272) = 17408.
  EXPECT_EQ(stage_pool_costs(cfg, 2, 4, kv_typed(KvType::kQ8_0, KvType::kQ8_0)).kv_block_bytes, 17408u);
  // K f16 (512 B) + V q4r (128 + 16 = 144 B): 2 * 16 * 656 = 20992.
  EXPECT_EQ(stage_pool_costs(cfg, 2, 4, kv_typed(KvType::kF16, KvType::kQ4r)).kv_block_bytes, 20992u);
  for (KvType t : {KvType::kF32, KvType::kBf16, KvType::kF16, KvType::kQ8_0, KvType::kFp8, KvType::kQ4r}) {
    const PoolCosts c = stage_pool_costs(cfg, 2, 4, kv_typed(t, t));
    EXPECT_EQ(c.kv_block_bytes, 2u * 16 * 2 * kv_row_bytes(t, 256)) << kv_type_name(t);
    EXPECT_EQ(c.state_record_bytes, 19456u) << kv_type_name(t);
  }
}

// The same budget buys kv_row_bytes(f32) / kv_row_bytes(q8_0) = 1024 / 272 times the KV blocks.
TEST(PoolSizing, Q8KvCacheHoldsMoreBlocksInTheSameMemory) {
  const ModelConfig cfg = four_kv_heads();
  const PoolCosts f32 = stage_pool_costs(cfg, 2, 4, kv_typed(KvType::kF32, KvType::kF32));
  const PoolCosts q8 = stage_pool_costs(cfg, 2, 4, kv_typed(KvType::kQ8_0, KvType::kQ8_0));
  PoolRequest r = fit(cache_geometry(16, 1'000'000, 4, 0), 10);
  r.limit.k_type = r.limit.v_type = KvType::kQ8_0;
  // 4 slots take 77824 B of state; the rest buys 1000 f32 blocks of 65536 B, or 3764 q8_0 ones of 17408.
  const uint64_t budget = 4 * 19456 + 1000 * f32.kv_block_bytes;
  const PoolSizing a = size_pools(f32, r, budget), b = size_pools(q8, r, budget);
  EXPECT_EQ(a.geometry.num_blocks, 1000u);
  EXPECT_EQ(b.geometry.num_blocks, 1000u * 1024 / 272);  // 3764
  EXPECT_EQ(b.geometry.k_type, KvType::kQ8_0) << "the sized geometry keeps the request's types";
  EXPECT_EQ(b.bytes, 4 * 19456 + 3764u * 17408);
  PoolRequest exact = r;
  exact.exact = true;
  exact.limit.num_blocks = 10;
  EXPECT_NE(error_of(q8, exact, 1000).find("(10 KV blocks of 16 tokens (q8_0), 4 state slots"), std::string::npos)
      << error_of(q8, exact, 1000);
}

TEST(ByteSize, ParsesUnitsAndRejectsJunk) {
  uint64_t v = 0;
  EXPECT_TRUE(parse_byte_size("1048576", &v));
  EXPECT_EQ(v, 1048576u);
  EXPECT_TRUE(parse_byte_size("3M", &v));
  EXPECT_EQ(v, 3u << 20);
  EXPECT_TRUE(parse_byte_size("4GiB", &v));
  EXPECT_EQ(v, 4ull << 30);
  EXPECT_TRUE(parse_byte_size("64k", &v));
  EXPECT_EQ(v, 64u << 10);
  for (const char* bad : {"", "M", "1.5G", "-1", "4X", "4 G", "17179869184T"}) {
    EXPECT_FALSE(parse_byte_size(bad, &v)) << bad;
  }
  EXPECT_EQ(format_bytes(3407872), "3.25 MiB");
  EXPECT_EQ(format_bytes(512), "512 B");
}

}  // namespace
}  // namespace ds
