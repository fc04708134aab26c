// Unit tests of the memory pieces: KV block allocator, snapshot store, slot pool.
#include <gtest/gtest.h>

#include <vector>

#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/scheduler/prefix_cache.h"
#include "coordinator/scheduler/slot_pool.h"
#include "coordinator/scheduler/snapshot_store.h"

namespace ds {
namespace {

TEST(BlockAllocator, AllocatesUntilEmptyAndFreesOnLastRelease) {
  BlockAllocator a(3, 4);
  auto b0 = a.allocate(), b1 = a.allocate(), b2 = a.allocate();
  ASSERT_TRUE(b0 && b1 && b2);
  EXPECT_FALSE(a.allocate());
  a.ref(*b1);  // shared
  a.release(*b1);
  EXPECT_EQ(a.num_free(), 0u);
  a.release(*b1);
  EXPECT_EQ(a.num_free(), 1u);
  EXPECT_THROW(a.release(*b1), std::logic_error);
  EXPECT_EQ(a.check_invariants(), "");
}

TEST(BlockAllocator, PublishedBlockIsFoundUntilReallocated) {
  BlockAllocator a(2, 2);
  std::vector<int32_t> tokens{5, 6};
  uint32_t b = *a.allocate();
  ASSERT_TRUE(a.publish(b, 42, 7, tokens));
  a.release(b);  // free but cached
  EXPECT_EQ(a.lookup(42, 7, tokens), b);
  EXPECT_FALSE(a.lookup(42, 8, tokens)) << "parent must match";
  EXPECT_FALSE(a.lookup(42, 7, std::vector<int32_t>{5, 9})) << "tokens must match";
  // The uncached block is handed out first; then the cached one is evicted.
  uint32_t other = *a.allocate();
  EXPECT_NE(other, b);
  EXPECT_EQ(a.lookup(42, 7, tokens), b);
  EXPECT_EQ(*a.allocate(), b);
  EXPECT_FALSE(a.lookup(42, 7, tokens));
  EXPECT_EQ(a.num_evictions(), 1u);
  EXPECT_EQ(a.check_invariants(), "");
}

TEST(BlockAllocator, RefRevivesCachedFreeBlockAndDuplicatesStayPrivate) {
  BlockAllocator a(3, 1);
  uint32_t b = *a.allocate();
  uint32_t dup = *a.allocate();
  std::vector<int32_t> t{1};
  EXPECT_TRUE(a.publish(b, 9, 0, t));
  EXPECT_FALSE(a.publish(dup, 9, 0, t));
  a.release(b);
  EXPECT_EQ(a.num_free(), 2u);
  a.ref(b);
  EXPECT_EQ(a.num_free(), 1u);
  EXPECT_EQ(a.ref_count(b), 1u);
  EXPECT_EQ(a.check_invariants(), "");
}

TEST(BlockAllocator, LeastRecentlyFreedCachedBlockIsEvictedFirst) {
  BlockAllocator a(2, 1);
  uint32_t x = *a.allocate(), y = *a.allocate();
  a.publish(x, 1, 0, std::vector<int32_t>{1});
  a.publish(y, 2, 0, std::vector<int32_t>{2});
  a.release(y);
  a.release(x);
  EXPECT_EQ(*a.allocate(), y);
  a.clear_cache();
  EXPECT_FALSE(a.lookup(1, 0, std::vector<int32_t>{1}));
  EXPECT_EQ(a.check_invariants(), "");
}

TEST(SnapshotStore, PendingIsInvisibleAndNotEvicted) {
  SnapshotStore s(1);
  auto id = s.reserve(10);
  ASSERT_TRUE(id);
  EXPECT_FALSE(s.find(10));
  EXPECT_FALSE(s.reserve(11)) << "the only id is pending";
  s.commit(*id);
  EXPECT_EQ(s.find(10), id);
  EXPECT_EQ(s.check_invariants(), "");
}

TEST(SnapshotStore, EvictsLeastRecentlyUsed) {
  SnapshotStore s(2);
  s.commit(*s.reserve(1));
  s.commit(*s.reserve(2));
  ASSERT_TRUE(s.find(1));  // 2 is now the LRU one
  s.commit(*s.reserve(3));
  EXPECT_TRUE(s.find(1));
  EXPECT_FALSE(s.find(2));
  EXPECT_TRUE(s.find(3));
  EXPECT_EQ(s.num_evictions(), 1u);
  s.erase(1);
  EXPECT_EQ(s.size(), 1u);
  s.clear();
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.check_invariants(), "");
}

TEST(SnapshotStore, ZeroCapacityNeverReserves) {
  SnapshotStore s(0);
  EXPECT_FALSE(s.reserve(1));
}

TEST(SlotPool, ReusesLowestFreeSlot) {
  SlotPool p(3);
  EXPECT_EQ(p.acquire(), 0u);
  EXPECT_EQ(p.acquire(), 1u);
  EXPECT_EQ(p.acquire(), 2u);
  EXPECT_FALSE(p.acquire());
  p.release(1);
  EXPECT_EQ(p.acquire(), 1u);
  EXPECT_THROW(p.release(7), std::out_of_range);
}

TEST(PrefixHash, ChainsOverParents) {
  std::vector<int32_t> t{1, 2, 3};
  EXPECT_EQ(hash_block(1, t), hash_block(1, t));
  EXPECT_NE(hash_block(1, t), hash_block(2, t));
  EXPECT_NE(hash_block(1, t), hash_block(1, std::vector<int32_t>{1, 2, 4}));
}

}  // namespace
}  // namespace ds
