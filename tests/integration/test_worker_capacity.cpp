// Workers size their pools from their own memory budgets (Assign CACHE_SIZING_FIT_BUDGET) and
// report them at Ready; the engine plans with the minimum, a restarted worker gets exactly the
// negotiated pools (or fails loudly), and an explicit block count a worker cannot hold fails
// start-up. Real deltaserve-worker processes, each with its own --memory-budget, started by a
// supervisor the test owns (the engine treats them as external workers).
//
// Expected numbers, from the tiny fixture with --layer-split 4,4 and up to 256 blocks of 16
// tokens, 4 slots, 8 snapshots, max_context 1024 (= 64 blocks per sequence):
//  rank 0 [0,4): attention layer 3 -> KV block 1 * 2 * 16 * (2 * 64) * 4 B = 16384 B;
//                3 GDN layers -> state record 3 * 19456 = 58368 B (conv 768 + ssm 4096 floats)
//  rank 1 [4,8): attention layer 7 + the MTP pool -> 32768 B per block; 3 GDN layers -> 58368 B
//  rank 1 with 3 MiB: state (4 + 8) * 58368 = 700416; (3145728 - 700416) / 32768 = 74 blocks
//  rank 1 with 2 MiB, exactly 74 blocks: needs 74 * 32768 + 700416 = 3125248 > 2097152
//  (the tiny model has 8 main layers; attention at 3 and 7, the MTP block after them)
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "common/ipc/channel.h"
#include "common/ipc/endpoints.h"
#include "coordinator/engine/supervisor.h"
#include "tests/integration/engine_test_util.h"

namespace ds {
namespace {

CacheGeometry geometry(uint32_t blocks, uint32_t slots, uint32_t snapshots) {
  CacheGeometry g;
  g.block_size = 16;
  g.num_blocks = blocks;
  g.max_seqs = slots;
  g.num_snapshots = snapshots;
  return g;
}

// A 2-stage pipeline whose workers run with the budgets in `budget` (by rank; changeable
// before a restart).
struct BudgetedPipeline {
  std::map<uint32_t, std::string> budget;
  std::string endpoint = ipc::make_ipc_control_endpoint();
  LocalSupervisor supervisor;
  EngineOptions options;

  explicit BudgetedPipeline(std::map<uint32_t, std::string> budgets)
      : budget(std::move(budgets)), supervisor(std::string(DS_BIN_DIR) + "/deltaserve-worker", 2, [this](uint32_t r) {
          return std::vector<std::string>{"--coordinator",   endpoint,          "--rank",
                                          std::to_string(r), "--memory-budget", budget.at(r)};
        }) {
    options = test::engine_options(2);
    options.external_workers = true;
    options.control_endpoint = endpoint;
    options.layer_split = {4, 4};
    options.max_context = 1024;
    options.cache = geometry(256, 4, 8);
    options.cache_sizing = CacheSizing::kFitBudget;
    supervisor.start_all();
  }
  ~BudgetedPipeline() {
    supervisor.stop_all(std::chrono::milliseconds(2000));
    ipc::remove_ipc_endpoint_dir(endpoint);
  }
};

// Kills `rank`, lets the test's supervisor restart it and the engine notice, then recovers.
void restart_and_recover(BudgetedPipeline& p, PipelineEngine& engine, uint32_t rank) {
  const pid_t old = p.supervisor.pid(rank);
  ASSERT_EQ(kill(old, SIGKILL), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!(engine.needs_recovery() && p.supervisor.pid(rank) != 0 && p.supervisor.pid(rank) != old)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "worker not restarted";
    p.supervisor.poll();
    engine.pump(20);
  }
  engine.recover();
}

TEST(WorkerCapacity, EnginePlansWithTheSmallestWorkersPools) {
  BudgetedPipeline p({{0, "64M"}, {1, "3M"}});
  PipelineEngine engine(p.options);
  engine.start();
  EXPECT_EQ(engine.cache_geometry(), geometry(74, 4, 8));
  const std::vector<WorkerInfo> w = engine.workers();
  EXPECT_EQ(w[0].pools, geometry(256, 4, 8));  // the bound: 64 MiB holds far more
  EXPECT_EQ(w[1].pools, geometry(74, 4, 8));
  EXPECT_EQ(w[1].pool_budget_bytes, 3u << 20);
  EXPECT_EQ(w[1].pool_bytes, 74u * 32768 + 700416);
  EXPECT_LE(w[1].pool_bytes, w[1].pool_budget_bytes);

  // A restarted worker is sized to the negotiated pools, not to its own budget again: rank 0
  // now allocates exactly 74 blocks.
  restart_and_recover(p, engine, 0);
  EXPECT_EQ(engine.cache_geometry(), geometry(74, 4, 8));
  EXPECT_EQ(engine.workers()[0].pools, geometry(74, 4, 8));
}

TEST(WorkerCapacity, RestartedWorkerThatCannotHoldTheNegotiatedPoolsFailsLoudly) {
  BudgetedPipeline p({{0, "64M"}, {1, "3M"}});
  PipelineEngine engine(p.options);
  engine.start();
  ASSERT_EQ(engine.cache_geometry(), geometry(74, 4, 8));
  p.budget[1] = "2M";
  try {
    restart_and_recover(p, engine, 1);
    FAIL() << "recovered with a worker that cannot hold the pools";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("worker rank 1 failed to load"), std::string::npos) << m;
    EXPECT_NE(m.find("74 KV blocks"), std::string::npos) << m;
    EXPECT_NE(m.find("2.00 MiB"), std::string::npos) << m;
  }
  EXPECT_EQ(engine.cache_geometry(), geometry(74, 4, 8));  // never silently shrunk
}

TEST(WorkerCapacity, ExplicitBlockCountThatAWorkerCannotHoldFailsStartup) {
  BudgetedPipeline p({{0, "64M"}, {1, "3M"}});
  p.options.cache = geometry(200, 4, 8);
  p.options.require_num_blocks = true;
  PipelineEngine engine(p.options);
  try {
    engine.start();
    FAIL() << "started although rank 1 holds only 74 of 200 blocks";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("worker rank 1 can hold only 74 KV blocks"), std::string::npos) << m;
    EXPECT_NE(m.find("200 KV blocks were asked for"), std::string::npos) << m;
  }
}

TEST(WorkerCapacity, BudgetTooSmallForOneSequenceFailsStartupWithTheReason) {
  BudgetedPipeline p({{0, "64M"}, {1, "1M"}});  // one slot + 64 blocks of rank 1 need > 2 MiB
  PipelineEngine engine(p.options);
  try {
    engine.start();
    FAIL() << "started with a worker that holds nothing";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("worker rank 1 failed to load"), std::string::npos) << m;
    EXPECT_NE(m.find("cannot hold one sequence"), std::string::npos) << m;
  }
}

// A fake worker that answers Assign with a Ready whose pools are `bad`: the engine must fail
// start-up with the reason instead of planning with them.
std::string startup_error_with_ready(const CacheGeometry& bad) {
  EngineOptions o = test::engine_options(1);
  o.external_workers = true;
  o.control_endpoint = ipc::make_ipc_control_endpoint();
  o.startup_timeout_ms = 10000;
  o.max_context = 1024;
  o.cache = geometry(256, 4, 8);
  o.cache_sizing = CacheSizing::kFitBudget;
  std::atomic<bool> done{false};
  std::thread fake([&] {
    ipc::Context ctx;
    ipc::ZmqChannel control(ctx, ipc::SocketRole::kDealer, o.control_endpoint);
    ipc::v1::Envelope hello;
    hello.set_sender_instance(77);
    hello.mutable_hello()->set_rank(0);
    hello.mutable_hello()->set_instance_id(77);
    hello.mutable_hello()->set_hostname("fake");
    hello.mutable_hello()->set_protocol_version(ipc::kProtocolVersion);
    for (int i = 0; i < 200 && !done; ++i) {
      control.send(hello);
      ipc::Received msg;
      std::string why;
      if (control.recv(&msg, 50, &why) != ipc::RecvStatus::kMessage || !msg.env.has_assign()) continue;
      ipc::v1::Envelope reply;
      reply.set_sender_instance(77);
      ipc::v1::Ready* r = reply.mutable_ready();
      r->set_rank(0);
      r->set_ok(true);
      r->set_instance_id(77);
      r->set_kv_block_size(bad.block_size);
      r->set_kv_blocks(bad.num_blocks);
      r->set_state_slots(bad.max_seqs);
      r->set_state_snapshots(bad.num_snapshots);
      control.send(reply);
      while (!done) control.recv(&msg, 50, &why);  // stay connected until the engine decided
    }
  });
  std::string error = "(started)";
  try {
    PipelineEngine engine(o);
    engine.start();
  } catch (const std::exception& e) {
    error = e.what();
  }
  done = true;
  fake.join();
  ipc::remove_ipc_endpoint_dir(o.control_endpoint);
  return error;
}

TEST(WorkerCapacity, ImpossibleReadyCapacityFailsStartupWithoutCrashing) {
  const std::string zero = startup_error_with_ready(geometry(0, 4, 8));
  EXPECT_NE(zero.find("worker rank 0 failed to load: bad pool capacity: worker rank 0 reported kv_blocks = 0"),
            std::string::npos)
      << zero;
  const std::string absurd = startup_error_with_ready(geometry(4000000000u, 4, 8));
  EXPECT_NE(absurd.find("kv_blocks = 4000000000 in Ready (expected 64..256)"), std::string::npos) << absurd;
  const std::string slots = startup_error_with_ready(geometry(100, 0, 8));
  EXPECT_NE(slots.find("state_slots = 0"), std::string::npos) << slots;
}

}  // namespace
}  // namespace ds
