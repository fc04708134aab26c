// Splitting --gpu-memory-fraction among workers on one GPU (coordinator/engine/gpu_share.h).
// Shares are fraction x layers / layers on that GPU; the expected values are worked out by hand
// and compared to 1e-12 (a few double roundings of numbers near 1).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
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

// The start-up hint: only CUDA workers sharing a GPU without MPS get one, naming the GPU.
TEST(GpuShare, SharedGpuHintOnlyWithoutMps) {
  EXPECT_TRUE(shared_gpu_hint("cpu", {0, 0}, 2, false).empty());
  EXPECT_TRUE(shared_gpu_hint("cuda", {}, 2, false).empty()) << "GPUs 0 and 1";
  EXPECT_TRUE(shared_gpu_hint("cuda", {0, 0}, 2, true).empty()) << "MPS is running";
  const std::string hint = shared_gpu_hint("cuda", {1, 0, 1}, 3, false);
  EXPECT_NE(hint.find("2 workers share GPU 1"), std::string::npos) << hint;
  EXPECT_NE(hint.find("--mps on"), std::string::npos) << hint;
}

// MPS counts as running when its pipe directory holds a control socket (not a plain file).
TEST(GpuShare, MpsDetectedByItsControlSocket) {
  char tmpl[] = "/tmp/ds-mps-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, control = dir + "/control";
  EXPECT_FALSE(mps_control_running(dir.c_str()));
  { std::ofstream(control) << "not a socket"; }
  EXPECT_FALSE(mps_control_running(dir.c_str()));
  std::remove(control.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", control.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_TRUE(mps_control_running(dir.c_str()));
  close(fd);
  std::remove(control.c_str());
  rmdir(dir.c_str());
  EXPECT_FALSE(mps_control_running("/nonexistent/ds-mps"));
}

TEST(GpuShare, DecodeGroupsOnlyAcrossDevices) {
  EXPECT_EQ(auto_decode_groups("cuda", {}, 2, 1, 8), 2u) << "ranks 0 and 1 on GPUs 0 and 1";
  EXPECT_EQ(auto_decode_groups("cuda", {0, 1}, 2, 1, 8), 2u);
  EXPECT_EQ(auto_decode_groups("cuda", {0, 0}, 2, 1, 8), 1u) << "one GPU: half batches read the weights twice";
  EXPECT_EQ(auto_decode_groups("cuda", {0, 0, 1}, 3, 1, 8), 2u);
  EXPECT_EQ(auto_decode_groups("cuda", {}, 1, 1, 8), 1u);
  EXPECT_EQ(auto_decode_groups("cpu", {}, 2, 1, 2), 2u) << "each worker has its own core";
  EXPECT_EQ(auto_decode_groups("cpu", {}, 2, 4, 8), 2u);
  EXPECT_EQ(auto_decode_groups("cpu", {}, 3, 1, 2), 1u) << "more worker threads than cores";
  EXPECT_EQ(auto_decode_groups("cpu", {}, 2, 4, 6), 1u);
  EXPECT_EQ(auto_decode_groups("cpu", {}, 1, 1, 8), 1u);
}

}  // namespace
}  // namespace ds
