// The worker's options come from flags, DELTASERVE_WORKER_* variables and a config file, with
// precedence flag > environment > file > default, and bad values are rejected with a message.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "worker/daemon/worker_options.h"
#include "worker/decode_gemv.h"

namespace ds {
namespace {

bool parse(std::initializer_list<const char*> args, WorkerOptions* o, std::string* error) {
  static char program[] = "deltaserve-worker";
  std::vector<std::vector<char>> storage;
  std::vector<char*> argv{program};
  for (const char* a : args) {
    storage.emplace_back(a, a + std::strlen(a) + 1);
  }
  for (auto& a : storage) argv.push_back(a.data());
  bool help = false;
  return parse_worker_options(static_cast<int>(argv.size()), argv.data(), o, error, &help);
}

TEST(WorkerOptions, FlagsEnvironmentAndConfigFileLayer) {
  const std::string path = ::testing::TempDir() + "/worker.conf";
  {
    std::ofstream f(path);
    f << "# worker settings\ncoordinator = ipc:///tmp/x/control\nthreads = 3\nrank = 7\n";
  }
  setenv("DELTASERVE_WORKER_RANK", "2", 1);
  WorkerOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--config", path.c_str(), "--threads", "5"}, &o, &error)) << error;
  EXPECT_EQ(o.coordinator, "ipc:///tmp/x/control");  // file
  EXPECT_EQ(o.rank, 2u);                             // environment beats file
  EXPECT_EQ(o.threads, 5);                           // flag beats file
  unsetenv("DELTASERVE_WORKER_RANK");
}

TEST(WorkerOptions, BadValuesAreRejectedWithTheirSource) {
  WorkerOptions o;
  std::string error;
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--gpu-memory-fraction", "1.5"}, &o, &error));
  EXPECT_NE(error.find("gpu-memory-fraction"), std::string::npos) << error;
  setenv("DELTASERVE_WORKER_THREADS", "zero", 1);
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0"}, &o, &error));
  EXPECT_NE(error.find("DELTASERVE_WORKER_THREADS"), std::string::npos) << error;
  unsetenv("DELTASERVE_WORKER_THREADS");
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x"}, &o, &error));  // no rank anywhere
  EXPECT_FALSE(parse({"--config", "/nonexistent/worker.conf", "--rank", "0"}, &o, &error));
}

TEST(WorkerOptions, MemoryBudgetTakesByteSizesAndHasAnExplicitDefault) {
  WorkerOptions o;
  std::string error;
  EXPECT_EQ(o.memory_budget_bytes, 0u);  // 0 = the documented default below
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--memory-budget", "3M"}, &o, &error)) << error;
  EXPECT_EQ(o.memory_budget_bytes, 3u << 20);
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--gpu-workspace-reserve=512M"}, &o, &error)) << error;
  EXPECT_EQ(o.gpu_workspace_reserve_bytes, 512u << 20);
  for (const char* bad : {"0", "1.5G", "lots", ""}) {
    EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--memory-budget", bad}, &o, &error)) << bad;
    EXPECT_NE(error.find("memory-budget"), std::string::npos) << error;
  }
  // A quarter of RAM, at most 4 GiB (and 4 GiB when RAM is unknown).
  EXPECT_EQ(default_cpu_pool_budget(8ull << 30), 2ull << 30);
  EXPECT_EQ(default_cpu_pool_budget(64ull << 30), 4ull << 30);
  EXPECT_EQ(default_cpu_pool_budget(0), 4ull << 30);
}

TEST(WorkerOptions, PrefillPrecisionFromFlagEnvironmentAndConfigFile) {
  WorkerOptions defaults;
  std::string error;
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0"}, &defaults, &error)) << error;
  EXPECT_EQ(defaults.prefill_precision, "bf16");  // CudaBackendOptions' default
  const std::string path = ::testing::TempDir() + "/worker_prefill.conf";
  {
    std::ofstream f(path);
    f << "coordinator = ipc:///x\nrank = 0\nprefill-precision = f32\n";
  }
  WorkerOptions from_file;
  ASSERT_TRUE(parse({"--config", path.c_str()}, &from_file, &error)) << error;
  EXPECT_EQ(from_file.prefill_precision, "f32");
  setenv("DELTASERVE_WORKER_PREFILL_PRECISION", "bf16", 1);
  WorkerOptions from_env;
  ASSERT_TRUE(parse({"--config", path.c_str()}, &from_env, &error)) << error;
  EXPECT_EQ(from_env.prefill_precision, "bf16");  // environment beats file
  WorkerOptions from_flag;
  ASSERT_TRUE(parse({"--config", path.c_str(), "--prefill-precision=f32"}, &from_flag, &error)) << error;
  EXPECT_EQ(from_flag.prefill_precision, "f32");  // flag beats environment
  unsetenv("DELTASERVE_WORKER_PREFILL_PRECISION");
  EXPECT_NE(describe(from_flag).find("prefill_precision=f32"), std::string::npos) << describe(from_flag);
  // The cpu backend takes either value (it always computes in f32).
  WorkerOptions cpu;
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--backend", "cpu", "--prefill-precision", "f32"},
                    &cpu, &error))
      << error;
  EXPECT_EQ(cpu.prefill_precision, "f32");
}

TEST(WorkerOptions, BadPrefillPrecisionIsRefusedWithItsSource) {
  for (const char* bad : {"fp16", "BF16", "", "tf32"}) {
    WorkerOptions o;
    std::string error;
    EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--prefill-precision", bad}, &o, &error)) << bad;
    EXPECT_NE(error.find("--prefill-precision: bad option or value: prefill-precision '" + std::string(bad) + "'"),
              std::string::npos)
        << error;
  }
  setenv("DELTASERVE_WORKER_PREFILL_PRECISION", "half", 1);
  WorkerOptions o;
  std::string error;
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0"}, &o, &error));
  EXPECT_NE(error.find("environment DELTASERVE_WORKER_PREFILL_PRECISION"), std::string::npos) << error;
  unsetenv("DELTASERVE_WORKER_PREFILL_PRECISION");
}

TEST(WorkerOptions, Bf16WeightCopyFromFlagEnvironmentAndConfigFile) {
  WorkerOptions defaults;
  std::string error;
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0"}, &defaults, &error)) << error;
  EXPECT_EQ(defaults.bf16_weight_copy, "off");  // CudaBackendOptions' default
  const std::string path = ::testing::TempDir() + "/worker_copy.conf";
  {
    std::ofstream f(path);
    f << "coordinator = ipc:///x\nrank = 0\nbf16-weight-copy = auto\n";
  }
  WorkerOptions from_file;
  ASSERT_TRUE(parse({"--config", path.c_str()}, &from_file, &error)) << error;
  EXPECT_EQ(from_file.bf16_weight_copy, "auto");
  setenv("DELTASERVE_WORKER_BF16_WEIGHT_COPY", "on", 1);
  WorkerOptions from_env;
  ASSERT_TRUE(parse({"--config", path.c_str()}, &from_env, &error)) << error;
  EXPECT_EQ(from_env.bf16_weight_copy, "on");  // environment beats file
  WorkerOptions from_flag;
  ASSERT_TRUE(parse({"--config", path.c_str(), "--bf16-weight-copy", "off"}, &from_flag, &error)) << error;
  EXPECT_EQ(from_flag.bf16_weight_copy, "off");  // flag beats environment
  unsetenv("DELTASERVE_WORKER_BF16_WEIGHT_COPY");
  EXPECT_NE(describe(from_flag).find("bf16_weight_copy=off decode_gemv=auto"), std::string::npos)
      << describe(from_flag);
  // --prefill-gemm is gone: cuBLASLt runs the bf16 prefill products.
  WorkerOptions gemm;
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--prefill-gemm", "mma"}, &gemm, &error));
  EXPECT_NE(error.find("--prefill-gemm: bad option or value: prefill-gemm 'mma'"), std::string::npos) << error;
}

TEST(WorkerOptions, BadBf16WeightCopyIsRefusedWithItsSource) {
  for (const char* value : {"yes", "1", ""}) {
    WorkerOptions o;
    std::string error;
    EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--bf16-weight-copy", value}, &o, &error)) << value;
    EXPECT_NE(error.find("--bf16-weight-copy: bad option or value: bf16-weight-copy '" + std::string(value) + "'"),
              std::string::npos)
        << error;
  }
  setenv("DELTASERVE_WORKER_BF16_WEIGHT_COPY", "always", 1);
  WorkerOptions o;
  std::string error;
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0"}, &o, &error));
  EXPECT_NE(error.find("environment DELTASERVE_WORKER_BF16_WEIGHT_COPY"), std::string::npos) << error;
  unsetenv("DELTASERVE_WORKER_BF16_WEIGHT_COPY");
}

// Every option shows in the start-up line, which starts with the rank (the e2e tests find the
// workers' lines by "starting: rank=").
TEST(WorkerOptions, DescribeListsEveryOption) {
  WorkerOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "3", "--memory-budget", "3M"}, &o, &error)) << error;
  const std::string line = describe(o);
  EXPECT_EQ(line.rfind("rank=3 coordinator=ipc:///x ", 0), 0u) << line;
  for (const char* key : {"backend=", "device=", "threads=", "heartbeat_ms=", "hostname=", "gpu_memory_fraction=",
                          "memory_budget=3.00MiB", "gpu_workspace_reserve=2.00GiB", "log_format=", "hidden_transport=",
                          "early_handoff=", "prefill_precision=", "bf16_weight_copy=", "decode_gemv=", "busy_poll_us=0",
                          "kv_cache_type=fp8", "kv_cache_type_k=fp8", "kv_cache_type_v=fp8"}) {
    EXPECT_NE(line.find(std::string(" ") + key), std::string::npos) << key << " in " << line;
  }
}

// --decode-gemv: auto by default, which picks the tensor-core GEMV when the server speculates or
// the model is wider than 4096; dp4a and mma are kept as given; other values are refused.
TEST(WorkerOptions, DecodeGemvValuesAndWhatAutoPicks) {
  WorkerOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0"}, &o, &error)) << error;
  EXPECT_EQ(o.decode_gemv, "auto");
  EXPECT_FALSE(decode_gemv_is_mma(o.decode_gemv, 0, 4096)) << "9B, no speculation: dp4a";
  EXPECT_TRUE(decode_gemv_is_mma(o.decode_gemv, 3, 4096)) << "9B speculating: verify rows on tensor cores";
  EXPECT_TRUE(decode_gemv_is_mma(o.decode_gemv, 0, 5120)) << "27B: tensor cores are the faster decode GEMV too";
  EXPECT_FALSE(decode_gemv_is_mma(o.decode_gemv, 0, 2048)) << "narrow models, no speculation: dp4a";
  EXPECT_FALSE(decode_gemv_is_mma("dp4a", 3, 5120));
  EXPECT_TRUE(decode_gemv_is_mma("mma", 0, 1024));
  for (const char* v : {"dp4a", "mma"}) {
    WorkerOptions given;
    ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--decode-gemv", v}, &given, &error)) << error;
    EXPECT_EQ(given.decode_gemv, v);
  }
  WorkerOptions bad;
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--decode-gemv", "tensor"}, &bad, &error));
  EXPECT_NE(error.find("--decode-gemv: bad option or value: decode-gemv 'tensor'"), std::string::npos) << error;
}

// --busy-poll-us: -1 (auto) resolves by backend; explicit values win; out-of-range values are refused.
TEST(WorkerOptions, BusyPollWindowAutoByBackendAndExplicit) {
  WorkerOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0"}, &o, &error)) << error;
  EXPECT_EQ(busy_poll_window_us(o), 0) << "cpu workers need their cores";
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--backend", "cuda"}, &o, &error)) << error;
  EXPECT_EQ(busy_poll_window_us(o), 5000);
  ASSERT_TRUE(
      parse({"--coordinator", "ipc:///x", "--rank", "0", "--backend", "cuda", "--busy-poll-us", "0"}, &o, &error))
      << error;
  EXPECT_EQ(busy_poll_window_us(o), 0);
  WorkerOptions bad;
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--busy-poll-us", "-2"}, &bad, &error));
  EXPECT_NE(error.find("busy-poll-us"), std::string::npos) << error;
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--busy-poll-us", "soon"}, &bad, &error));
}

// --kv-cache-type T sets K and V, -k / -v one side over it (in any order, from any layer); every
// type name is taken, anything else is refused naming the flag and the types.
TEST(WorkerOptions, KvCacheTypeFlags) {
  std::string error;
  WorkerOptions o;
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0"}, &o, &error)) << error;
  EXPECT_EQ(o.kv_cache.k_type(), kDefaultKvType);
  EXPECT_EQ(o.kv_cache.v_type(), kDefaultKvType);
  for (const char* name : {"f32", "bf16", "f16", "q8_0", "fp8", "q4r"}) {
    WorkerOptions w;
    ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--kv-cache-type", name}, &w, &error)) << error;
    EXPECT_STREQ(kv_type_name(w.kv_cache.k_type()), name);
    EXPECT_STREQ(kv_type_name(w.kv_cache.v_type()), name);
  }
  WorkerOptions split;
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--kv-cache-type-v", "f16", "--kv-cache-type", "q8_0"},
                    &split, &error))
      << error;
  EXPECT_EQ(split.kv_cache.k_type(), KvType::kQ8_0);
  EXPECT_EQ(split.kv_cache.v_type(), KvType::kF16) << "-v wins whatever the order";
  EXPECT_NE(describe(split).find(" kv_cache_type=q8_0 kv_cache_type_k=q8_0 kv_cache_type_v=f16"), std::string::npos)
      << describe(split);
  setenv("DELTASERVE_WORKER_KV_CACHE_TYPE_K", "fp8", 1);
  WorkerOptions env_k;
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--kv-cache-type", "bf16"}, &env_k, &error)) << error;
  EXPECT_EQ(env_k.kv_cache.k_type(), KvType::kFp8) << "a side set in the environment beats both set by flag";
  EXPECT_EQ(env_k.kv_cache.v_type(), KvType::kBf16);
  unsetenv("DELTASERVE_WORKER_KV_CACHE_TYPE_K");
  for (const char* flag : {"--kv-cache-type", "--kv-cache-type-k", "--kv-cache-type-v"}) {
    WorkerOptions bad;
    EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0", flag, "q4_0"}, &bad, &error)) << flag;
    const std::string name = std::string(flag).substr(2);
    EXPECT_NE(
        error.find(std::string(flag) + ": bad option or value: " + name + " 'q4_0' (valid: f32|bf16|f16|q8_0|fp8|q4r)"),
        std::string::npos)
        << error;
  }
}

}  // namespace
// --early-handoff: on (default), host or off; anything else is refused.
TEST(WorkerOptions, EarlyHandoffValues) {
  WorkerOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "1"}, &o, &error)) << error;
  EXPECT_EQ(o.early_handoff, "on");
  for (const char* v : {"host", "off"}) {
    WorkerOptions w;
    ASSERT_TRUE(parse({"--coordinator", "ipc:///x", "--rank", "1", "--early-handoff", v}, &w, &error)) << error;
    EXPECT_EQ(w.early_handoff, v);
  }
  WorkerOptions bad;
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "1", "--early-handoff", "device"}, &bad, &error));
  EXPECT_NE(error.find("early-handoff"), std::string::npos) << error;
}

}  // namespace ds
