#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace ds::cpu {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {0, 1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{64}, size_t{1000}, size_t{4099}}) {
      for (size_t chunk : {size_t{0}, size_t{1}, size_t{3}, size_t{16}, size_t{5000}}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<bool> short_chunk{false};
        pool.parallel_for(n, chunk, [&](size_t b, size_t e) {
          // Every chunk but the last one is at least min_chunk long.
          if (e - b < chunk && e != n) short_chunk = true;
          for (size_t i = b; i < e; ++i) hits[i]++;
        });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << chunk << " " << i;
        EXPECT_FALSE(short_chunk.load());
      }
    }
  }
}

TEST(ThreadPool, ManyConsecutiveJobs) {
  ThreadPool pool(3);
  std::atomic<size_t> total{0};
  for (int rep = 0; rep < 2000; ++rep) {
    pool.parallel_for(17, 1, [&](size_t b, size_t e) { total += e - b; });
  }
  EXPECT_EQ(total.load(), size_t{17 * 2000});
}

TEST(ThreadPool, InlineWhenSingleThreaded) {
  ThreadPool pool(1);
  EXPECT_EQ(pool.size(), 1);
  const auto caller = std::this_thread::get_id();
  pool.parallel_for(100, 1, [&](size_t b, size_t e) {
    EXPECT_EQ(b, 0u);
    EXPECT_EQ(e, 100u);
    EXPECT_EQ(std::this_thread::get_id(), caller);
  });
}

TEST(ThreadPool, CallerExceptionPropagates) {
  ThreadPool pool(2);
  // Chunk 0 always runs on the caller first, so the exception comes from the calling thread.
  EXPECT_THROW(pool.parallel_for(100, 10,
                                 [&](size_t b, size_t) {
                                   if (b == 0) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  // Still usable afterwards.
  std::atomic<size_t> n{0};
  pool.parallel_for(50, 1, [&](size_t b, size_t e) { n += e - b; });
  EXPECT_EQ(n.load(), 50u);
}

TEST(ThreadPool, DefaultPool) {
  EXPECT_NE(default_pool(), nullptr);
  set_default_pool_threads(2);
  EXPECT_EQ(default_pool()->size(), 2);
  set_default_pool_threads(1);
  EXPECT_EQ(default_pool()->size(), 1);
}

}  // namespace
}  // namespace ds::cpu
