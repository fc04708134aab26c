// The coordinator's side of worker pool sizing (coordinator/engine/capacity.h): a Ready's
// capacity is checked against its Assign, the pipeline plans with the minimum over its
// workers, and an explicit KV block count that a worker cannot hold is a clear error.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "coordinator/engine/capacity.h"
#include "tests/testutil/cache_geometry.h"

namespace ds {
namespace {
namespace v1 = ipc::v1;

using test::cache_geometry;

v1::Ready ready(uint32_t rank, const CacheGeometry& g) {
  v1::Ready r;
  r.set_rank(rank);
  r.set_ok(true);
  r.set_kv_block_size(g.block_size);
  r.set_kv_blocks(g.num_blocks);
  r.set_state_slots(g.max_seqs);
  r.set_state_snapshots(g.num_snapshots);
  r.set_cache_bytes(12345);
  r.set_cache_budget_bytes(3u << 20);
  return r;
}

const CacheGeometry kAsked = cache_geometry(16, 100, 4, 8);
constexpr uint32_t kMinBlocks = 10;

std::string error_of(const v1::Ready& r, bool exact) {
  try {
    ready_capacity(r, kAsked, exact, kMinBlocks);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(WorkerCapacity, ReadyWithinTheBoundsIsTaken) {
  const WorkerCapacity w = ready_capacity(ready(1, cache_geometry(16, 60, 3, 6)), kAsked, false, kMinBlocks);
  EXPECT_EQ(w.rank, 1u);
  EXPECT_EQ(w.pools, cache_geometry(16, 60, 3, 6));
  EXPECT_EQ(w.bytes, 12345u);
  EXPECT_EQ(w.budget_bytes, 3u << 20);
}

TEST(WorkerCapacity, ImpossibleReadyValuesAreErrors) {
  // Parsed from the wire like a real frame, so the checks see exactly what protobuf decodes.
  auto wire = [](const CacheGeometry& g) {
    v1::Ready parsed;
    EXPECT_TRUE(parsed.ParseFromString(ready(2, g).SerializeAsString()));
    return parsed;
  };
  const uint32_t absurd = std::numeric_limits<uint32_t>::max();
  EXPECT_NE(error_of(wire(cache_geometry(16, 0, 4, 8)), false).find("worker rank 2 reported kv_blocks = 0"),
            std::string::npos);
  EXPECT_NE(error_of(wire(cache_geometry(16, absurd, 4, 8)), false).find("kv_blocks = 4294967295"), std::string::npos);
  EXPECT_NE(error_of(wire(cache_geometry(16, 9, 4, 8)), false).find("kv_blocks = 9 in Ready (expected 10..100)"),
            std::string::npos);
  EXPECT_NE(error_of(wire(cache_geometry(32, 60, 4, 8)), false).find("kv_block_size = 32"), std::string::npos);
  EXPECT_NE(error_of(wire(cache_geometry(16, 60, 0, 8)), false).find("state_slots = 0"), std::string::npos);
  EXPECT_NE(error_of(wire(cache_geometry(16, 60, 5, 8)), false).find("state_slots = 5"), std::string::npos);
  EXPECT_NE(error_of(wire(cache_geometry(16, 60, 4, absurd)), false).find("state_snapshots"), std::string::npos);
  // A Ready that says nothing about pools (an old worker) has 0 blocks: rejected too.
  v1::Ready bare;
  bare.set_rank(0);
  bare.set_ok(true);
  EXPECT_NE(error_of(bare, false).find("kv_block_size = 0"), std::string::npos);
}

TEST(WorkerCapacity, ExactRequestsMustComeBackAsAsked) {
  EXPECT_EQ(ready_capacity(ready(0, kAsked), kAsked, true, kMinBlocks).pools, kAsked);
  EXPECT_NE(error_of(ready(0, cache_geometry(16, 99, 4, 8)), true).find("kv_blocks = 99 in Ready (expected 100)"),
            std::string::npos);
  EXPECT_NE(error_of(ready(0, cache_geometry(16, 100, 3, 8)), true).find("state_slots = 3"), std::string::npos);
  EXPECT_NE(error_of(ready(0, cache_geometry(16, 100, 4, 7)), true).find("state_snapshots = 7"), std::string::npos);
}

TEST(WorkerCapacity, PipelineUsesTheMinimumOfEveryField) {
  const std::vector<WorkerCapacity> caps{{0, cache_geometry(16, 100, 2, 8), 0, 0},
                                         {1, cache_geometry(16, 40, 4, 8), 0, 0},
                                         {2, cache_geometry(16, 70, 4, 5), 0, 0}};
  EXPECT_EQ(common_capacity(caps), cache_geometry(16, 40, 2, 5));
  EXPECT_THROW(common_capacity({}), std::invalid_argument);
  EXPECT_THROW(common_capacity({{0, cache_geometry(16, 1, 1, 0), 0, 0}, {1, cache_geometry(32, 1, 1, 0), 0, 0}}),
               std::invalid_argument);
}

// Ready does not report the KV types: the capacity keeps Assign's, so the geometry the pipeline
// adopts (and assigns to a restarted worker) still has them.
TEST(WorkerCapacity, KvTypesAreTheAssignedOnes) {
  CacheGeometry asked = kAsked;
  asked.k_type = KvType::kQ8_0;
  asked.v_type = KvType::kF16;
  const WorkerCapacity w0 = ready_capacity(ready(0, cache_geometry(16, 60, 4, 8)), asked, false, kMinBlocks);
  const WorkerCapacity w1 = ready_capacity(ready(1, cache_geometry(16, 50, 3, 8)), asked, false, kMinBlocks);
  EXPECT_EQ(w0.pools.k_type, KvType::kQ8_0);
  EXPECT_EQ(w0.pools.v_type, KvType::kF16);
  const CacheGeometry common = common_capacity({w0, w1});
  EXPECT_EQ(common.num_blocks, 50u);
  EXPECT_EQ(common.k_type, KvType::kQ8_0);
  EXPECT_EQ(common.v_type, KvType::kF16);
}

TEST(WorkerCapacity, ExplicitBlockCountNamesTheWorkerThatCannotHoldIt) {
  const std::vector<WorkerCapacity> caps{{0, cache_geometry(16, 100, 4, 8), 1, 1u << 30},
                                         {1, cache_geometry(16, 60, 4, 8), 1, 3u << 20}};
  EXPECT_NO_THROW(require_kv_blocks(caps, 60));
  try {
    require_kv_blocks(caps, 101);  // both fall short: both are named
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("worker rank 0 can hold only 100 KV blocks"), std::string::npos) << m;
    EXPECT_NE(m.find("; worker rank 1 can hold only 60 KV blocks"), std::string::npos) << m;
  }
  try {
    require_kv_blocks(caps, 100);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("worker rank 1 can hold only 60 KV blocks", 0), 0u) << m;  // rank 0 holds 100: not named
    EXPECT_NE(m.find("3.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("but 100 KV blocks were asked for (--kv-blocks)"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace ds
