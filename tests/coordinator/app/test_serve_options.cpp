// `deltaserve serve` options: --prefill-precision comes from a flag, DELTASERVE_PREFILL_PRECISION
// or the config file (flag > environment > file), bad values are refused with their source, and
// the winning value reaches the workers serve spawns as one --prefill-precision flag, which the
// worker's own parser accepts. The KV cache types (--kv-cache-type[-k|-v]) travel in Assign and
// every worker takes them over its own flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/ipc/protocol.h"  // set_assign_kv_types
#include "common/kv_format.h"
#include "coordinator/app/model_host.h"  // side_model_options, ModelHost
#include "coordinator/app/serve_options.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/daemon/worker_options.h"

namespace ds {
namespace {

using Env = std::map<std::string, std::string>;

// argv storage for the parsers, which take char** (they do not write through it).
class Argv {
 public:
  Argv(std::initializer_list<std::string> head, const std::vector<std::string>& tail = {}) {
    for (const std::string& a : head) storage_.emplace_back(a.begin(), a.end());
    for (const std::string& a : tail) storage_.emplace_back(a.begin(), a.end());
    for (auto& a : storage_) {
      a.push_back('\0');
      pointers_.push_back(a.data());
    }
  }
  int argc() { return static_cast<int>(pointers_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::vector<char>> storage_;
  std::vector<char*> pointers_;
};

bool parse(std::initializer_list<std::string> args, const Env& env, ServeOptions* o, std::string* error) {
  Argv a(args);
  bool help = false;
  return parse_serve_options(a.argc(), a.argv(), env, o, error, &help);
}

// What a worker with its default options ends up with, given the Assign the engine would send
// (coordinator/engine/engine.cpp make_assign copies these EngineOptions fields).
WorkerOptions worker_under(const ServeOptions& serve, WorkerOptions own = {}) {
  ipc::v1::Assign a;
  a.set_prefill_precision(serve.engine.prefill_precision);
  a.set_decode_gemv(serve.engine.decode_gemv);
  a.set_bf16_weight_copy(serve.engine.bf16_weight_copy);
  a.set_pool_budget_bytes(serve.engine.pool_budget_bytes);
  ipc::set_assign_kv_types(&a, serve.engine.cache.k_type, serve.engine.cache.v_type);
  ipc::v1::Assign wire;  // through the wire format, as a worker receives it
  EXPECT_TRUE(wire.ParseFromString(a.SerializeAsString()));
  return with_assigned_settings(own, wire);
}

TEST(ServeOptions, PrefillPrecisionUnsetSendsTheDefaultToEveryWorker) {
  ServeOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {}, &o, &error)) << error;
  EXPECT_FALSE(o.prefill_precision.has_value());
  EXPECT_EQ(o.engine.prefill_precision, "bf16");  // sent anyway: every worker computes the same way
  WorkerOptions own;
  own.prefill_precision = "f32";  // an external worker started with another flag
  EXPECT_EQ(worker_under(o, own).prefill_precision, "bf16");
  EXPECT_TRUE(o.engine.worker_extra_args.empty());
  EXPECT_NE(describe(o).find("prefill_precision=bf16"), std::string::npos) << describe(o);
}

TEST(ServeOptions, PrefillPrecisionFromFlagEnvironmentAndConfigFile) {
  const std::string path = ::testing::TempDir() + "/serve_prefill.conf";
  {
    std::ofstream f(path);
    f << "model = m.gguf\nprefill-precision = f32\n";
  }
  ServeOptions from_file;
  std::string error;
  ASSERT_TRUE(parse({"--config", path}, {}, &from_file, &error)) << error;
  EXPECT_EQ(from_file.engine.prefill_precision, "f32");

  ServeOptions from_env;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {{"DELTASERVE_PREFILL_PRECISION", "f32"}}, &from_env, &error)) << error;
  EXPECT_EQ(from_env.engine.prefill_precision, "f32");

  // All three layers set it: the flag wins.
  ServeOptions all;
  ASSERT_TRUE(
      parse({"--config", path, "--prefill-precision=bf16"}, {{"DELTASERVE_PREFILL_PRECISION", "f32"}}, &all, &error))
      << error;
  EXPECT_EQ(all.engine.prefill_precision, "bf16");
  EXPECT_NE(describe(all).find("prefill_precision=bf16"), std::string::npos) << describe(all);
}

TEST(ServeOptions, BadPrefillPrecisionIsRefusedWithItsSource) {
  for (const std::string& bad : std::vector<std::string>{"fp16", "BF16", "", "f16"}) {
    ServeOptions o;
    std::string error;
    EXPECT_FALSE(parse({"--model", "m.gguf", "--prefill-precision", bad}, {}, &o, &error)) << bad;
    EXPECT_NE(error.find("--prefill-precision: bad value '" + bad + "' for prefill-precision"), std::string::npos)
        << error;
  }
  ServeOptions o;
  std::string error;
  EXPECT_FALSE(parse({"--model", "m.gguf"}, {{"DELTASERVE_PREFILL_PRECISION", "half"}}, &o, &error));
  EXPECT_NE(error.find("environment DELTASERVE_PREFILL_PRECISION: bad value 'half'"), std::string::npos) << error;
}

// The settings serve sends in Assign are what the workers compute with, whatever their own flags.
TEST(ServeOptions, WorkersTakeTheNumericsServeSendsInAssign) {
  for (const std::string& precision : std::vector<std::string>{"f32", "bf16"}) {
    ServeOptions serve;
    std::string error;
    ASSERT_TRUE(parse(
        {"--model", "m.gguf", "--prefill-precision", precision, "--decode-gemv", "mma", "--gpu-memory-fraction", "0.5"},
        {}, &serve, &error))
        << error;
    WorkerOptions own;
    own.decode_gemv = "dp4a";
    const WorkerOptions w = worker_under(serve, own);
    EXPECT_EQ(w.prefill_precision, precision);
    EXPECT_EQ(w.decode_gemv, "mma");
    // The fraction goes to the engine, which splits it among workers sharing a GPU and passes
    // each its own share (tests/coordinator/engine/test_gpu_share.cpp).
    EXPECT_EQ(serve.engine.gpu_memory_fraction, 0.5);
    EXPECT_EQ(w.gpu_memory_fraction, 0.9) << "the worker keeps its default unless the engine passes a share";
  }
  ipc::v1::Assign bad;
  bad.set_decode_gemv("fast");
  EXPECT_THROW(with_assigned_settings({}, bad), std::runtime_error);
}

// --bf16-weight-copy: validated by serve and sent in Assign (the winning value); unset: off.
// --prefill-gemm is gone.
TEST(ServeOptions, Bf16WeightCopyIsPassedToTheWorkers) {
  ServeOptions unset;
  std::string error;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {}, &unset, &error)) << error;
  EXPECT_TRUE(unset.engine.worker_extra_args.empty());
  EXPECT_EQ(unset.engine.bf16_weight_copy, "off");

  ServeOptions serve;
  ASSERT_TRUE(
      parse({"--model", "m.gguf", "--bf16-weight-copy=on"}, {{"DELTASERVE_BF16_WEIGHT_COPY", "auto"}}, &serve, &error))
      << error;
  EXPECT_EQ(serve.engine.bf16_weight_copy, "on");
  EXPECT_EQ(worker_under(serve).bf16_weight_copy, "on");

  ServeOptions from_env;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {{"DELTASERVE_BF16_WEIGHT_COPY", "auto"}}, &from_env, &error)) << error;
  EXPECT_EQ(from_env.engine.bf16_weight_copy, "auto");

  ServeOptions gemm;
  EXPECT_FALSE(parse({"--model", "m.gguf", "--prefill-gemm", "mma"}, {}, &gemm, &error));
  EXPECT_NE(error.find("--prefill-gemm: unknown option 'prefill-gemm'"), std::string::npos) << error;
}

TEST(ServeOptions, BadBf16WeightCopyIsRefusedWithItsSource) {
  for (const std::string& bad : std::vector<std::string>{"yes", "ON", ""}) {
    ServeOptions o;
    std::string error;
    EXPECT_FALSE(parse({"--model", "m.gguf", "--bf16-weight-copy", bad}, {}, &o, &error)) << bad;
    EXPECT_NE(error.find("--bf16-weight-copy: bad value '" + bad + "' for bf16-weight-copy"), std::string::npos)
        << error;
  }
}

// --busy-poll: auto by default; on / off also reach the workers serve starts (their --busy-poll-us
// is set by the engine: see PipelineEngine's worker arguments); anything else is refused.
TEST(ServeOptions, BusyPollValues) {
  ServeOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {}, &o, &error)) << error;
  EXPECT_EQ(o.engine.busy_poll, "auto");
  ServeOptions off;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--busy-poll", "off"}, {}, &off, &error)) << error;
  EXPECT_EQ(off.engine.busy_poll, "off");
  ServeOptions bad;
  EXPECT_FALSE(parse({"--model", "m.gguf", "--busy-poll", "sometimes"}, {}, &bad, &error));
  EXPECT_NE(error.find("busy-poll"), std::string::npos) << error;
}

// --draft-vocab: 0 (every id) by default; a count; not a number is refused.
TEST(ServeOptions, DraftVocabValues) {
  std::string error;
  ServeOptions o;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {}, &o, &error)) << error;
  EXPECT_EQ(o.draft_vocab, 0u);
  ServeOptions some;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--spec-k", "3", "--draft-vocab", "32768"}, {}, &some, &error)) << error;
  EXPECT_EQ(some.draft_vocab, 32768u);
  ServeOptions bad;
  EXPECT_FALSE(parse({"--model", "m.gguf", "--draft-vocab", "many"}, {}, &bad, &error));
  EXPECT_NE(error.find("draft-vocab"), std::string::npos) << error;
}

// --early-handoff: on by default; host / off reach the workers (PipelineEngine passes them on).
TEST(ServeOptions, EarlyHandoffValues) {
  std::string error;
  ServeOptions o;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {}, &o, &error)) << error;
  EXPECT_EQ(o.engine.early_handoff, "on");
  ServeOptions host;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--early-handoff", "host"}, {}, &host, &error)) << error;
  EXPECT_EQ(host.engine.early_handoff, "host");
  ServeOptions bad;
  EXPECT_FALSE(parse({"--model", "m.gguf", "--early-handoff", "gpu"}, {}, &bad, &error));
  EXPECT_NE(error.find("early-handoff"), std::string::npos) << error;
}

TEST(ServeOptions, DecodeGroupsValues) {
  std::string error;
  ServeOptions o;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {}, &o, &error)) << error;
  EXPECT_EQ(o.decode_groups, 0u) << "auto";
  ServeOptions two;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--decode-groups", "2"}, {}, &two, &error)) << error;
  EXPECT_EQ(two.decode_groups, 2u);
  ServeOptions from_env;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {{"DELTASERVE_DECODE_GROUPS", "3"}}, &from_env, &error)) << error;
  EXPECT_EQ(from_env.decode_groups, 3u);
  ServeOptions back_to_auto;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--decode-groups", "auto"}, {{"DELTASERVE_DECODE_GROUPS", "3"}},
                    &back_to_auto, &error))
      << error;
  EXPECT_EQ(back_to_auto.decode_groups, 0u);
  for (const char* bad : {"0", "9", "two", "-1"}) {
    ServeOptions b;
    EXPECT_FALSE(parse({"--model", "m.gguf", "--decode-groups", bad}, {}, &b, &error)) << bad;
    EXPECT_NE(error.find("decode-groups"), std::string::npos) << error;
  }
}

// describe() (the start-up line) lists every option, the api key masked; --help lists every flag
// and no retired one.
TEST(ServeOptions, DescribeAndHelpListEveryOption) {
  ServeOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--api-key", "hunter2", "--memory-budget", "2G"}, {}, &o, &error)) << error;
  const std::string line = describe(o);
  EXPECT_EQ(line.find("hunter2"), std::string::npos) << line;
  EXPECT_NE(line.find(" api_key=*** "), std::string::npos) << line;
  const std::vector<std::string> names = {"model",
                                          "workers",
                                          "backend",
                                          "threads",
                                          "layer-split",
                                          "devices",
                                          "external-workers",
                                          "control-endpoint",
                                          "max-context",
                                          "max-batch-tokens",
                                          "max-seqs",
                                          "block-size",
                                          "kv-blocks",
                                          "prefix-cache-snapshots",
                                          "spec-k",
                                          "draft-vocab",
                                          "host",
                                          "port",
                                          "api-key",
                                          "served-model-name",
                                          "max-body",
                                          "io-threads",
                                          "max-queue",
                                          "request-threads",
                                          "shutdown-grace",
                                          "gpu-memory-fraction",
                                          "memory-budget",
                                          "startup-timeout",
                                          "hidden-transport",
                                          "early-handoff",
                                          "busy-poll",
                                          "mps",
                                          "pipeline-depth",
                                          "decode-groups",
                                          "prefill-precision",
                                          "bf16-weight-copy",
                                          "decode-gemv",
                                          "kv-cache-type",
                                          "kv-cache-type-k",
                                          "kv-cache-type-v",
                                          "log-format"};
  Argv help_argv({"--help"});
  bool help = false;
  ServeOptions h;
  std::string text;
  EXPECT_FALSE(parse_serve_options(help_argv.argc(), help_argv.argv(), {}, &h, &text, &help));
  EXPECT_TRUE(help);
  for (const std::string& name : names) {
    std::string key = name;
    std::replace(key.begin(), key.end(), '-', '_');
    EXPECT_NE((" " + line).find(" " + key + "="), std::string::npos) << key << " in " << line;
    EXPECT_NE(text.find("--" + name + " "), std::string::npos) << name << " in " << text;
  }
  EXPECT_NE(line.find(" memory_budget=2G "), std::string::npos) << line;
  for (const char* retired : {"--micro-batches", "--prefill-gemm"}) EXPECT_EQ(text.find(retired), std::string::npos);
  EXPECT_TRUE(o.engine.worker_extra_args.empty());
  EXPECT_EQ(o.engine.pool_budget_bytes, uint64_t{2} << 30);  // sent in Assign
  EXPECT_EQ(worker_under(o).memory_budget_bytes, uint64_t{2} << 30);
}

// --kv-cache-type T: every type reaches the engine's geometry (sent in Assign), and a worker
// started with another flag takes the server's; unset, kDefaultKvType.
TEST(ServeOptions, KvCacheTypeReachesEveryWorker) {
  std::string error;
  ServeOptions unset;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {}, &unset, &error)) << error;
  EXPECT_EQ(unset.engine.cache.k_type, kDefaultKvType);
  EXPECT_EQ(unset.engine.cache.v_type, kDefaultKvType);
  EXPECT_NE(describe(unset).find(" kv_cache_type=fp8 kv_cache_type_k=fp8 kv_cache_type_v=fp8 "), std::string::npos)
      << describe(unset);
  for (const std::string name : {"f32", "bf16", "f16", "q8_0", "fp8", "q4r"}) {
    ServeOptions o;
    ASSERT_TRUE(parse({"--model", "m.gguf", "--kv-cache-type", name}, {}, &o, &error)) << error;
    EXPECT_EQ(kv_type_name(o.engine.cache.k_type), name);
    EXPECT_EQ(kv_type_name(o.engine.cache.v_type), name);
    WorkerOptions own;
    own.kv_cache.both = name == "f16" ? KvType::kQ8_0 : KvType::kF16;  // an external worker's other flag
    const WorkerOptions w = worker_under(o, own);
    EXPECT_EQ(kv_type_name(w.kv_cache.k_type()), name);
    EXPECT_EQ(kv_type_name(w.kv_cache.v_type()), name);
  }
}

// -k / -v override one side over --kv-cache-type, whatever the order or the layer each came from.
TEST(ServeOptions, KvCacheTypeKAndVOverrideOneSide) {
  std::string error;
  ServeOptions v_only;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--kv-cache-type-v", "f16", "--kv-cache-type", "q8_0"}, {}, &v_only, &error))
      << error;
  EXPECT_EQ(v_only.engine.cache.k_type, KvType::kQ8_0);
  EXPECT_EQ(v_only.engine.cache.v_type, KvType::kF16);
  const WorkerOptions w = worker_under(v_only);
  EXPECT_EQ(w.kv_cache.k_type(), KvType::kQ8_0);
  EXPECT_EQ(w.kv_cache.v_type(), KvType::kF16);

  ServeOptions k_from_env;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--kv-cache-type", "bf16"}, {{"DELTASERVE_KV_CACHE_TYPE_K", "q4r"}},
                    &k_from_env, &error))
      << error;
  EXPECT_EQ(k_from_env.engine.cache.k_type, KvType::kQ4r);
  EXPECT_EQ(k_from_env.engine.cache.v_type, KvType::kBf16);

  ServeOptions k_only;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--kv-cache-type-k=fp8"}, {}, &k_only, &error)) << error;
  EXPECT_EQ(k_only.engine.cache.k_type, KvType::kFp8);
  EXPECT_EQ(k_only.engine.cache.v_type, kDefaultKvType);
}

TEST(ServeOptions, BadKvCacheTypeNamesTheFlagAndTheTypes) {
  for (const std::string flag : {"kv-cache-type", "kv-cache-type-k", "kv-cache-type-v"}) {
    for (const std::string bad : {"q4_0", "F32", "", "int8"}) {
      ServeOptions o;
      std::string error;
      EXPECT_FALSE(parse({"--model", "m.gguf", "--" + flag, bad}, {}, &o, &error)) << flag << " " << bad;
      EXPECT_NE(
          error.find("--" + flag + ": bad value '" + bad + "' for " + flag + " (valid: f32|bf16|f16|q8_0|fp8|q4r)\n"),
          std::string::npos)
          << error;
    }
  }
  ServeOptions o;
  std::string error;
  EXPECT_FALSE(parse({"--model", "m.gguf"}, {{"DELTASERVE_KV_CACHE_TYPE", "q8"}}, &o, &error));
  EXPECT_NE(error.find("environment DELTASERVE_KV_CACHE_TYPE: bad value 'q8'"), std::string::npos) << error;
}

// Assign's types are checked: empty keeps the worker's own flag, an unknown name (a newer or
// corrupt peer) is an error naming the field and the types.
TEST(ServeOptions, WorkersRefuseAnUnknownKvCacheTypeFromTheWire) {
  WorkerOptions own;
  own.kv_cache.both = KvType::kBf16;
  const WorkerOptions kept = with_assigned_settings(own, ipc::v1::Assign{});
  EXPECT_EQ(kept.kv_cache.k_type(), KvType::kBf16);
  EXPECT_EQ(kept.kv_cache.v_type(), KvType::kBf16);
  ipc::v1::Assign bad;
  bad.set_kv_cache_type_k("q8_0");
  bad.set_kv_cache_type_v("q3_k");
  try {
    with_assigned_settings(own, bad);
    ADD_FAILURE() << "an unknown KV cache type was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "Assign.kv_cache_type_v = 'q3_k' is not a KV cache type (f32, bf16, f16, q8_0, fp8, q4r)");
  }
}

// The hosted embedding / reranker models store their KV cache as the chat model does.
TEST(ServeOptions, PeerModelsGetTheChatModelsKvCacheTypes) {
  ServeOptions o;
  std::string error;
  ASSERT_TRUE(
      parse({"--model", "m.gguf", "--embed-model", "e.gguf", "--kv-cache-type", "q8_0", "--kv-cache-type-v", "f16"}, {},
            &o, &error))
      << error;
  const ServeOptions embed = side_model_options(o, o.embed_model, "embed");
  EXPECT_EQ(embed.kv_cache.k_type(), KvType::kQ8_0);
  EXPECT_EQ(embed.kv_cache.v_type(), KvType::kF16);
  EXPECT_EQ(embed.engine.cache.k_type, KvType::kQ8_0);
  EXPECT_EQ(embed.engine.cache.v_type, KvType::kF16);
}

// A type the model's heads cannot be stored as fails when the model is opened, before any worker
// starts, naming the flag (the tiny embedding fixture: 1 KV head of 32, rows of 32 values).
TEST(ServeOptions, KvCacheTypeTheModelCannotStoreFailsBeforeTheWorkersStart) {
  const std::string model = std::string(DS_TESTDATA_DIR) + "/tiny-qwen3-embed-q8_0.gguf";
  for (const char* bad : {"q4r", "q8_0"}) {  // 18 and 34 B rows: not whole floats
    ServeOptions o;
    std::string error;
    ASSERT_TRUE(parse({"--model", model, "--kv-cache-type", bad}, {}, &o, &error)) << error;
    try {
      ModelHost host(o);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), model + ": --kv-cache-type " + bad +
                                           ": needs rows of a multiple of 4 bytes (the model's KV rows are 1 head "
                                           "of 32)");
    }
  }
  ServeOptions fine;
  std::string error;
  ASSERT_TRUE(parse({"--model", model, "--kv-cache-type", "fp8"}, {}, &fine, &error)) << error;
  EXPECT_NO_THROW(ModelHost{fine});
}

TEST(ServeOptions, PeerModelsAndUpstreams) {
  ServeOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--embed-model", "e.gguf", "--embed-workers", "2", "--embed-devices", "1,2",
                     "--rerank-upstream", "http://127.0.0.1:8002/base", "--upstream-timeout", "30"},
                    {{"DELTASERVE_UPSTREAM_API_KEY", "k"}}, &o, &error))
      << error;
  EXPECT_EQ(o.embed_model.model_path, "e.gguf");
  EXPECT_EQ(o.embed_model.n_workers, 2u);
  EXPECT_EQ(o.embed_model.devices, (std::vector<int>{1, 2}));
  EXPECT_EQ(o.rerank_upstream, "http://127.0.0.1:8002/base");
  EXPECT_EQ(o.upstream_api_key, "k");
  EXPECT_EQ(o.upstream_timeout_s, 30u);
  EXPECT_EQ(describe(o).find("=k "), std::string::npos) << "the upstream key is a secret";
  EXPECT_EQ(o.max_batch_tokens, 0u) << "auto: the mode decides";

  const auto refused = [](std::initializer_list<std::string> args, const std::string& why) {
    ServeOptions bad;
    std::string e;
    EXPECT_FALSE(parse(args, {}, &bad, &e)) << why;
    EXPECT_NE(e.find(why), std::string::npos) << e;
  };
  refused({"--model", "m.gguf", "--embed-model", "e.gguf", "--embed-upstream", "http://h:1"}, "give one");
  refused({"--model", "m.gguf", "--rerank-model", "r.gguf", "--rerank-devices", "0,1"}, "--rerank-devices");
  refused({"--model", "m.gguf", "--embed-upstream", "https://h"}, "--embed-upstream");
  refused({"--model", "m.gguf", "--embed-upstream", "http://h:99999"}, "--embed-upstream");
  refused({"--model", "m.gguf", "--upstream-timeout", "0"}, "upstream-timeout");
}

}  // namespace
}  // namespace ds
