// The mask pool: every index runs exactly once per job, over many jobs (a helper never runs
// a finished job's function), and an exception reaches the caller.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "coordinator/serving/parallel_for.h"

namespace ds {
namespace {

TEST(ParallelFor, EveryIndexOnceInEveryJob) {
  ParallelFor pool(3);
  for (int job = 0; job < 500; ++job) {
    const size_t n = static_cast<size_t>(job % 70);
    std::vector<std::atomic<int>> hits(n);
    pool.run(n, [&](size_t i) { hits[i].fetch_add(job + 1); });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), job + 1) << "job " << job << " index " << i;
  }
}

TEST(ParallelFor, TheFirstExceptionIsRethrownAfterTheJob) {
  ParallelFor pool(2);
  std::atomic<int> done{0};
  EXPECT_THROW(pool.run(40,
                        [&](size_t i) {
                          if (i == 7) throw std::runtime_error("seven");
                          done.fetch_add(1);
                        }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 39);
  pool.run(5, [&](size_t) { done.fetch_add(1); });  // still usable
  EXPECT_EQ(done.load(), 44);
}

TEST(ParallelFor, WithoutHelpersItIsAPlainLoop) {
  ParallelFor pool(0);
  std::vector<size_t> order;
  pool.run(4, [&](size_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace ds
