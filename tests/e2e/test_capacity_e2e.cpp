// Worker-sized KV / GDN pools, end to end (`deltaserve serve`, 2 CPU workers, real HTTP): each
// worker sizes its pools from its --memory-budget, reports them at Ready, and the server plans
// with the smallest (the /metrics gauges show it); an explicit --kv-blocks that a worker cannot
// hold stops start-up with which worker, how many fit and how many were asked; a smaller KV cache
// type (--kv-cache-type f16) buys the blocks its bytes say.
//
// Expected numbers (tiny fixture, --layer-split 4,4, --max-seqs 4 with 8 snapshots, 64 blocks
// per 1024-token context, --memory-budget 3M = 3145728 B for each worker):
//  rank 0 [0,4): 1 KV pool  -> 16384 B per block; 3 GDN layers -> 58368 B per slot/snapshot
//                (3145728 - 12 * 58368) / 16384 = 149 blocks
//  rank 1 [4,8): 2 KV pools (layer 7 + MTP) -> 32768 B per block; 3 GDN layers -> 58368 B
//                (3145728 - 12 * 58368) / 32768 = 74 blocks   <- the pipeline's capacity
// Same budget and layer count, but rank 1 runs two KV pools, so the workers hold different
// block counts and the minimum is really taken (the bound, 4 * 64 = 256 blocks, is not used).
// Workers with different budgets: tests/integration/test_worker_capacity.cpp.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <stdexcept>
#include <string>

#include "tests/e2e/server_process.h"
#include "tests/testutil/testutil.h"
#include "tests/testutil/vision_reference.h"

namespace ds::test {
namespace {

std::vector<std::string> args(const std::vector<std::string>& extra) {
  std::vector<std::string> a{"--model",         tiny_model_path(),
                             "--workers",       "2",
                             "--port",          "0",
                             "--layer-split",   "4,4",
                             "--max-seqs",      "4",
                             "--max-context",   "1024",
                             "--memory-budget", "3M"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(CapacityE2E, ServerPlansWithTheSmallestWorkersPools) {
  ServerProcess server(args({}));
  EXPECT_EQ(metric_value(server.port(), "deltaserve:kv_blocks_total"), 74);
  EXPECT_EQ(metric_value(server.port(), "deltaserve:gdn_slots_total"), 4);
  const std::string log = server.log();
  EXPECT_NE(log.find("worker rank 0 holds 149 KV blocks, 4 state slots, 8 snapshots"), std::string::npos) << log;
  EXPECT_NE(log.find("worker rank 1 holds 74 KV blocks, 4 state slots, 8 snapshots"), std::string::npos) << log;
  // 1184 tokens * 3 KV pools * (K + V) * 128 values * 4 B = 3.47 MiB.
  EXPECT_NE(log.find("KV capacity: 74 blocks of 16 tokens (1184 tokens in total, 3.47 MiB of f32 KV)"),
            std::string::npos)
      << log;
  // And it serves within that capacity.
  const HttpReply r =
      post_completion(server.port(), R"({"prompt": [9707, 11, 1879], "max_tokens": 8, "temperature": 0})");
  EXPECT_EQ(r.status, 200) << r.body;
}

// --kv-cache-type f16 halves a block's bytes: rank 1 holds (3145728 - 12 * 58368) / 16384 = 149
// blocks (rank 0's 298 are capped by the bound, 256), twice f32's 74 less the rounding.
TEST(CapacityE2E, HalfPrecisionKvCacheHoldsTwiceTheBlocks) {
  ServerProcess server(args({"--kv-cache-type", "f16"}));
  EXPECT_EQ(metric_value(server.port(), "deltaserve:kv_blocks_total"), 149);
  const std::string log = server.log();
  EXPECT_NE(log.find("worker rank 1 holds 149 KV blocks, 4 state slots, 8 snapshots"), std::string::npos) << log;
  EXPECT_NE(log.find("KV cache f16, 1536 bytes per token (3 attention layers)"), std::string::npos) << log;
  const HttpReply r =
      post_completion(server.port(), R"({"prompt": [9707, 11, 1879], "max_tokens": 8, "temperature": 0})");
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(CapacityE2E, ExplicitKvBlocksAWorkerCannotHoldFailsStartup) {
  try {
    ServerProcess server(args({"--kv-blocks", "100"}));
    FAIL() << "the server started with 100 KV blocks although rank 1 holds 74";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("fatal: worker rank 1 can hold only 74 KV blocks"), std::string::npos) << m;
    EXPECT_NE(m.find("but 100 KV blocks were asked for (--kv-blocks)"), std::string::npos) << m;
    EXPECT_EQ(m.find("worker rank 0 can hold"), std::string::npos) << m;  // rank 0 holds 149
  }
  // A count every worker holds is used as given.
  ServerProcess server(args({"--kv-blocks", "60"}));
  EXPECT_EQ(metric_value(server.port(), "deltaserve:kv_blocks_total"), 60);
}

TEST(CapacityE2E, BadMemoryBudgetIsRejectedBeforeAnythingStarts) {
  try {
    ServerProcess server(args({"--memory-budget", "lots"}));
    FAIL() << "started with --memory-budget lots";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad value 'lots' for memory-budget"), std::string::npos) << e.what();
  }
}

// The first number `pattern` (one group) captures in `log`; -1 when it does not match.
int64_t logged_number(const std::string& log, const std::string& pattern) {
  std::smatch m;
  return std::regex_search(log, m, std::regex(pattern)) ? std::stoll(m[1]) : -1;
}

// Stage 0's vision tower comes out of its pools' budget (worker/cache/tower_sizing.h). The VL
// fixture on one worker (its one attention layer: 16 tokens * 1024 B = 16384 B per block), 4M
// budget, images of at most 16 tokens (64 patches). On cpu the tower takes
//   weights:    f32 copies of its 21 vectors (1920 floats), the two patch taps as one f32 matrix
//               [64][1536], the f32 position grid [64][64] (its F16 matrices are read in place):
//               7680 + 393216 + 16384 = 417280 B
//   workspace:  64 patches * (1536 + 6 * 64 + 128) floats of scratch, 128 rope positions, the
//               host patch and position rows (64 * (1536 + 64) floats), the RGB pixels twice
//               (2 * 64 * 16 * 16 * 3): 524288 + 512 + 409600 + 98304 = 1032704 B
//   encodings:  16 cached images of 16 tokens * 64 floats, plus the one being made: 69632 B
// = 1519616 B = 92.75 blocks: the worker holds 92 or 93 blocks fewer than without --mmproj.
TEST(CapacityE2E, VisionTowerComesOutOfStage0sPools) {
  const std::vector<std::string> base{
      "--model", vision_model_path(), "--workers", "1", "--port", "0", "--max-seqs", "4", "--max-context",
      "1024",    "--memory-budget",   "4M"};
  std::vector<std::string> vision = base;
  vision.insert(vision.end(),
                {"--mmproj", vision_mmproj_path(), "--image-min-tokens", "16", "--image-max-tokens", "16"});
  ServerProcess text_only(base);
  ServerProcess with_tower(vision);
  const std::string held = "worker rank 0 holds ([0-9]+) KV blocks";
  const int64_t without = logged_number(text_only.log(), held), with = logged_number(with_tower.log(), held);
  const int64_t tower = logged_number(with_tower.log(), "= ([0-9]+) bytes set aside from the pools");
  EXPECT_EQ(tower, 1519616) << with_tower.log();
  EXPECT_EQ(logged_number(text_only.log(), "(set aside from the pools)"), -1) << "no tower, nothing set aside";
  EXPECT_GE(without - with, tower / 16384) << text_only.log() << with_tower.log();
  EXPECT_LE(without - with, tower / 16384 + 1);
  EXPECT_LT(without, 256) << "the bound (4 * 64 blocks) must not decide";
  EXPECT_EQ(metric_value(with_tower.port(), "deltaserve:kv_blocks_total"), static_cast<double>(with));
}

}  // namespace
}  // namespace ds::test
