// Splitting --gpu-memory-fraction among workers on one GPU (coordinator/engine/gpu_share.h).
// Shares are fraction x layers / layers on that GPU; the expected values are worked out by hand
// and compared to 1e-12 (a few double roundings of numbers near 1).
#include <gtest/gtest.h>

#include <numeric>

#include "common/error.h"
#include "coordinator/engine/gpu_share.h"

namespace ds {
namespace {

constexpr double kTol = 1e-12;

std::vector<StageRange> stages(const std::vector<uint32_t>& counts) {
  std::vector<StageRange> out;
  uint32_t first = 0;
  for (uint32_t c : counts) {
    out.push_back({first, first + c});
    first += c;
  }
  return out;
}

TEST(GpuShare, WorkersAloneOnTheirGpusKeepTheWholeFraction) {
  const std::vector<double> f = split_gpu_memory_fraction(0.8, {0, 1, 2}, stages({10, 12, 10}), true);
  ASSERT_EQ(f.size(), 3u);
  for (double x : f) EXPECT_NEAR(x, 0.8, kTol);
}

TEST(GpuShare, TwoWorkersOnOneGpuSplitByLayers) {
  // 32 layers as 17 + 15, MTP on the last stage: weights 17 and 16 of 33.
  const std::vector<double> f = split_gpu_memory_fraction(0.9, {0, 0}, stages({17, 15}), true);
  EXPECT_NEAR(f[0], 0.9 * 17 / 33, kTol);
  EXPECT_NEAR(f[1], 0.9 * 16 / 33, kTol);
  EXPECT_LE(f[0] + f[1], 0.9 + kTol) << "the shares on one GPU never exceed the fraction";
  // Without an MTP block: 17 and 15 of 32.
  const std::vector<double> g = split_gpu_memory_fraction(0.9, {0, 0}, stages({17, 15}), false);
  EXPECT_NEAR(g[0], 0.9 * 17 / 32, kTol);
  EXPECT_NEAR(g[1], 0.9 * 15 / 32, kTol);
}

TEST(GpuShare, EqualStagesOnOneGpuSplitEvenly) {
  const std::vector<double> f = split_gpu_memory_fraction(0.6, {3, 3, 3}, stages({4, 4, 4}), false);
  for (double x : f) EXPECT_NEAR(x, 0.2, kTol);
}

TEST(GpuShare, OnlyWorkersOfTheSameGpuShare) {
  // Ranks 0 and 2 share GPU 0 (8 + 8 layers), rank 1 is alone on GPU 1.
  const std::vector<double> f = split_gpu_memory_fraction(0.9, {0, 1, 0}, stages({8, 8, 8}), false);
  EXPECT_NEAR(f[0], 0.45, kTol);
  EXPECT_NEAR(f[1], 0.9, kTol);
  EXPECT_NEAR(f[2], 0.45, kTol);
}

TEST(GpuShare, BadInputsAreClearErrors) {
  EXPECT_THROW(split_gpu_memory_fraction(0.0, {0}, stages({4}), false), ConfigError);
  EXPECT_THROW(split_gpu_memory_fraction(1.5, {0}, stages({4}), false), ConfigError);
  EXPECT_THROW(split_gpu_memory_fraction(0.9, {0, 0}, stages({4}), false), ConfigError);
  EXPECT_THROW(split_gpu_memory_fraction(0.9, {-1}, stages({4}), false), ConfigError);
  EXPECT_THROW(split_gpu_memory_fraction(0.9, {0}, {StageRange{3, 3}}, false), ConfigError);
}

TEST(GpuShare, DevicesDefaultToRankNumbers) {
  EXPECT_EQ(device_of_each_rank({}, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(device_of_each_rank({0, 0}, 2), (std::vector<int>{0, 0}));
}

// What the engine passes each local worker as --gpu-memory-fraction.
TEST(GpuShare, FlagsOnlyWhereTheWorkersNeedThem) {
  const std::vector<StageRange> two = stages({17, 15});
  EXPECT_TRUE(gpu_fraction_flags("cpu", 0.5, {0, 0}, two, true).empty());
  EXPECT_TRUE(gpu_fraction_flags("cuda", std::nullopt, {}, two, true).empty()) << "alone on GPUs 0 and 1: own default";
  EXPECT_EQ(gpu_fraction_flags("cuda", 0.5, {}, two, true), (std::vector<std::string>{"0.500000", "0.500000"}));
  // Shared, no fraction given: 0.9 x 17/33 = 0.463636.., 0.9 x 16/33 = 0.436363.. (rounded down).
  EXPECT_EQ(gpu_fraction_flags("cuda", std::nullopt, {0, 0}, two, true),
            (std::vector<std::string>{"0.463636", "0.436363"}));
  EXPECT_EQ(gpu_fraction_flags("cuda", 0.6, {1, 1}, stages({4, 4}), false),
            (std::vector<std::string>{"0.300000", "0.300000"}));
}

}  // namespace
}  // namespace ds
