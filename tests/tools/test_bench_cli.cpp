// deltaserve-bench end to end on a synthetic tiny model: -o json rows in-process and through
// two real worker processes (-b chunking, token and step counts, sane rates), llama-bench short
// flags, the --http dispatch to the serving benchmark, batched decode rows (--parallel), and
// clear errors for bad flags (unknown --ablate names, retired flags).
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/server_process.h"

namespace {

const std::string kBin = DS_BIN_DIR;

struct CmdResult {
  int status = -1;     // exit status
  std::string output;  // stdout (plus stderr when the command redirects it)
};

CmdResult run(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// A tiny random-weight model, written once per test process (ctest runs each test case in its
// own process, possibly in parallel: the pid keeps their files apart).
const std::string& tiny_model() {
  static const std::string path = [] {
    const std::string name = "bench_cli_tiny_" + std::to_string(getpid()) + ".gguf";
    const std::string p = (std::filesystem::path(testing::TempDir()) / name).string();
    const CmdResult r = run(kBin + "/deltaserve-synth --shape tiny --out " + p + " 2>&1");
    EXPECT_EQ(r.status, 0) << r.output;
    return p;
  }();
  return path;
}

std::vector<rapidjson::Document> json_lines(const std::string& out) {
  std::vector<rapidjson::Document> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    rapidjson::Document d;
    d.Parse(line.c_str());
    EXPECT_FALSE(d.HasParseError()) << "not JSON: " << line;
    EXPECT_TRUE(d.IsObject()) << line;
    rows.push_back(std::move(d));
  }
  return rows;
}

uint64_t u(const rapidjson::Document& d, const char* key) {
  EXPECT_TRUE(d.HasMember(key) && d[key].IsUint64()) << key;
  return d.HasMember(key) && d[key].IsUint64() ? d[key].GetUint64() : ~0ull;
}

double num(const rapidjson::Document& d, const char* key) {
  EXPECT_TRUE(d.HasMember(key) && d[key].IsNumber()) << key;
  return d.HasMember(key) && d[key].IsNumber() ? d[key].GetDouble() : NAN;
}

// Rates are positive and finite, and the derived figures agree with them.
void expect_sane_rates(const rapidjson::Document& d, uint64_t repetitions) {
  const double avg = num(d, "avg_ts");
  EXPECT_TRUE(std::isfinite(avg) && avg > 0) << avg;
  EXPECT_GE(num(d, "stddev_ts"), 0.0);
  EXPECT_GE(num(d, "best_ts"), avg * (1 - 1e-5));  // %.6g printing: relative 1e-5 slack
  EXPECT_NEAR(num(d, "ms_per_token"), 1e3 / avg, 1e3 / avg * 1e-4);
  ASSERT_TRUE(d.HasMember("samples_ts") && d["samples_ts"].IsArray());
  EXPECT_EQ(d["samples_ts"].Size(), repetitions);
  EXPECT_EQ(u(d, "repetitions"), repetitions);
}

// The rows of `-p prompts -n gen -b batch -r reps`: pp then tg per prompt, counted tokens.
void expect_rows(const std::vector<rapidjson::Document>& rows, const std::vector<uint64_t>& prompts, uint64_t gen,
                 uint64_t batch, uint64_t workers, uint64_t reps) {
  ASSERT_EQ(rows.size(), 2 * prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const rapidjson::Document& pp = rows[2 * i];
    const rapidjson::Document& tg = rows[2 * i + 1];
    const uint64_t n = prompts[i];
    EXPECT_STREQ(pp["test"].GetString(), "pp");
    EXPECT_STREQ(tg["test"].GetString(), "tg");
    EXPECT_EQ(std::string(pp["model"].GetString()), tiny_model());
    EXPECT_STREQ(pp["backend"].GetString(), "cpu");
    EXPECT_EQ(u(pp, "n_workers"), workers);
    EXPECT_EQ(u(pp, "n_batch"), std::min(batch, n));
    EXPECT_EQ(u(pp, "n_prompt"), n);
    EXPECT_EQ(u(pp, "n_gen"), 0u);
    EXPECT_EQ(u(pp, "tokens"), n);                       // every prompt token was fed
    EXPECT_EQ(u(pp, "steps"), (n + batch - 1) / batch);  // in chunks of at most `batch`
    EXPECT_TRUE(pp["gb_per_s"].IsNull());
    EXPECT_GT(num(pp, "tflop_per_s"), 0.0);
    expect_sane_rates(pp, reps);
    EXPECT_EQ(u(tg, "n_prompt"), 0u);
    EXPECT_EQ(u(tg, "n_gen"), gen);
    EXPECT_EQ(u(tg, "n_depth"), n);
    EXPECT_EQ(u(tg, "tokens"), gen);
    EXPECT_EQ(u(tg, "steps"), gen);
    EXPECT_GT(num(tg, "gb_per_s"), 0.0);
    expect_sane_rates(tg, reps);
  }
}

TEST(BenchCli, JsonRowsThroughTwoWorkerProcesses) {
  const CmdResult r = run(kBin + "/deltaserve-bench -m " + tiny_model() +
                          " -p 100,64 -n 5 -b 64 --workers 2 -r 2 -t 1 -o json --no-warmup 2>/dev/null");
  ASSERT_EQ(r.status, 0) << r.output;
  expect_rows(json_lines(r.output), {100, 64}, 5, 64, 2, 2);
}

// --devices, --prefill-precision and the KV cache types reach the worker processes (the precision
// and the types in Assign): each worker logs what it applies ("settings from the coordinator:
// prefill_precision=f32 ... kv_cache_type_k=f16 kv_cache_type_v=bf16 ...") on the
// stderr it shares with the bench. CPU workers ignore the GPU list (the engine passes --device to cuda workers only),
// so on this GPU-less machine only its acceptance is tested here; the bad lists are below.
TEST(BenchCli, WorkersGetThePrefillPrecisionAndAcceptADeviceList) {
  const std::string err =
      (std::filesystem::path(testing::TempDir()) / ("bench_cli_workers_" + std::to_string(getpid()) + ".err")).string();
  const CmdResult r = run(kBin + "/deltaserve-bench -m " + tiny_model() +
                          " -p 32 -n 2 --workers 2 --devices 0,0 --prefill-precision f32 -r 1 -t 1 -o json" +
                          " --kv-cache-type bf16 --kv-cache-type-k f16 --no-warmup 2>" + err);
  const std::string log = run("cat " + err).output;
  ASSERT_EQ(r.status, 0) << r.output << log;
  expect_rows(json_lines(r.output), {32}, 2, 32, 2, 1);
  const std::string applied = "settings from the coordinator: prefill_precision=";
  size_t workers_with_f32 = 0, workers_told = 0;
  for (size_t at = log.find(applied); at != std::string::npos; at = log.find(applied, at + 1)) {
    ++workers_told;
    workers_with_f32 += log.compare(at + applied.size(), 3, "f32") == 0;
  }
  EXPECT_EQ(workers_told, 2u) << log;
  EXPECT_EQ(workers_with_f32, 2u) << log;
  const std::string kv = "kv_cache_type_k=f16 kv_cache_type_v=bf16";
  size_t workers_with_kv = 0;
  for (size_t at = log.find(kv); at != std::string::npos; at = log.find(kv, at + 1)) ++workers_with_kv;
  EXPECT_EQ(workers_with_kv, 2u) << log;
  EXPECT_NE(r.output.find("\"type_k\": \"f16\", \"type_v\": \"bf16\""), std::string::npos) << r.output;
  std::filesystem::remove(err);
}

TEST(BenchCli, JsonRowsInProcessWithLongFlags) {
  const CmdResult r = run(kBin + "/deltaserve-bench --model " + tiny_model() +
                          " --prompt 48 --gen 3 --batch 16 --repeat 1 --output json 2>/dev/null");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto rows = json_lines(r.output);
  expect_rows(rows, {48}, 3, 16, 0, 1);
  if (!rows.empty()) {
    EXPECT_EQ(num(rows[0], "stddev_ts"), 0.0);  // one repetition
  }
}

// One batched decode row of `--parallel n_seqs`: N sequences per step, aggregate counts, the
// step time and byte figures consistent with the rate; the limit only with a bandwidth.
void expect_batch_row(const rapidjson::Document& d, uint64_t prompt, uint64_t gen, uint64_t n_seqs, uint64_t workers,
                      uint64_t reps, double peak_gbps) {
  EXPECT_STREQ(d["test"].GetString(), "tg");
  EXPECT_EQ(u(d, "n_parallel"), n_seqs);
  EXPECT_EQ(u(d, "n_workers"), workers);
  EXPECT_EQ(u(d, "n_depth"), prompt);
  EXPECT_EQ(u(d, "n_gen"), gen);
  EXPECT_EQ(u(d, "steps"), gen);            // ONE forward step per decode position...
  EXPECT_EQ(u(d, "tokens"), gen * n_seqs);  // ...advancing every sequence
  expect_sane_rates(d, reps);
  const double avg = num(d, "avg_ts");
  // Printed with %.6g: relative 1e-4 covers the rounding of both operands.
  EXPECT_NEAR(num(d, "step_ms"), 1e3 * static_cast<double>(n_seqs) / avg, num(d, "step_ms") * 1e-4);
  const double gb_step = num(d, "gb_per_step");
  EXPECT_GT(gb_step, 0.0);
  EXPECT_NEAR(num(d, "gb_per_s"), gb_step * avg / static_cast<double>(n_seqs), num(d, "gb_per_s") * 1e-4);
  if (peak_gbps <= 0) {
    EXPECT_TRUE(d["limit_ts"].IsNull());
    EXPECT_TRUE(d["limit_fraction"].IsNull());
    return;
  }
  const double limit = num(d, "limit_ts");
  EXPECT_NEAR(limit, static_cast<double>(n_seqs) * peak_gbps / gb_step, limit * 1e-4);
  EXPECT_NEAR(num(d, "limit_fraction"), avg / limit, avg / limit * 1e-4);
}

TEST(BenchCli, ParallelAddsBatchedDecodeRowsInProcess) {
  const CmdResult r = run(kBin + "/deltaserve-bench -m " + tiny_model() +
                          " -p 40,24 -n 3 --parallel 1,3,2 -r 2 -t 1 --peak-gbps 50 -o json --no-warmup 2>/dev/null");
  ASSERT_EQ(r.status, 0) << r.output;
  auto rows = json_lines(r.output);
  ASSERT_EQ(rows.size(), 2u * 2u + 2u * 2u) << r.output;  // pp + tg per prompt, then 2 batched per prompt
  std::vector<rapidjson::Document> single;                // Documents move, they do not copy
  for (size_t i = 0; i < 4; ++i) single.push_back(std::move(rows[i]));
  ASSERT_NO_FATAL_FAILURE(expect_rows(single, {40, 24}, 3, 40, 0, 2));
  for (const auto& row : single) EXPECT_FALSE(row.HasMember("n_parallel"));  // N = 1 rows as before
  expect_batch_row(rows[4], 40, 3, 3, 0, 2, 50);
  expect_batch_row(rows[5], 40, 3, 2, 0, 2, 50);
  expect_batch_row(rows[6], 24, 3, 3, 0, 2, 50);
  expect_batch_row(rows[7], 24, 3, 2, 0, 2, 50);
  // More sequences at the same context: the weights are read once, so a step moves more bytes
  // but less than proportionally more.
  EXPECT_GT(num(rows[4], "gb_per_step"), num(rows[5], "gb_per_step"));
  EXPECT_LT(num(rows[4], "gb_per_step"), 1.5 * num(rows[5], "gb_per_step"));
}

TEST(BenchCli, ParallelThroughTwoWorkerProcessesAndInTheTable) {
  const CmdResult j = run(kBin + "/deltaserve-bench -m " + tiny_model() +
                          " -p 32 -n 4 --parallel 4 --workers 2 -r 1 -t 1 -o json --no-warmup 2>/dev/null");
  ASSERT_EQ(j.status, 0) << j.output;
  const auto rows = json_lines(j.output);
  ASSERT_EQ(rows.size(), 1u) << j.output;  // no 1 in --parallel: only the batched row
  expect_batch_row(rows[0], 32, 4, 4, 2, 1, 0);
  const CmdResult t = run(kBin + "/deltaserve-bench -m " + tiny_model() + " -p 16 -n 2 -r 1 --parallel 1,2 2>&1");
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("pp_tok/s"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("agg_tok/s"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("byte limit not reported"), std::string::npos) << t.output;
}

// Decode groups: 5 sequences as groups of 2 and 3 in flight at once; every sequence still
// advances one token per round (tokens = 5 x gen, steps = gen rounds).
TEST(BenchCli, DecodeGroupsThroughTwoWorkerProcesses) {
  const CmdResult j =
      run(kBin + "/deltaserve-bench -m " + tiny_model() +
          " -p 24 -n 4 --parallel 5 --workers 2 --decode-groups 2 -r 1 -t 1 -o json --no-warmup 2>/dev/null");
  ASSERT_EQ(j.status, 0) << j.output;
  const auto rows = json_lines(j.output);
  ASSERT_EQ(rows.size(), 1u) << j.output;
  expect_batch_row(rows[0], 24, 4, 5, 2, 1, 0);
}

TEST(BenchCli, TableModeStillPrintsTheTable) {
  const CmdResult r = run(kBin + "/deltaserve-bench -m " + tiny_model() + " -p 16 -n 2 -r 1 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("pp_tok/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("in-process"), std::string::npos) << r.output;
}

TEST(BenchCli, HttpModeRunsTheServingBenchmark) {
  // Port 1 refuses the connection: the serving benchmark still runs and reports the failure.
  const CmdResult r = run(kBin + "/deltaserve-bench --http http://127.0.0.1:1 --concurrency 1 --requests 2 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("| concurrency | requests | failed |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| 1 | 2 | 2 |"), std::string::npos) << r.output;
  const CmdResult j = run(kBin + "/deltaserve-bench --http http://localhost:1 --concurrency 1,2 --requests 3 -o json");
  ASSERT_EQ(j.status, 0) << j.output;
  const auto rows = json_lines(j.output);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(u(rows[0], "concurrency"), 1u);
  EXPECT_EQ(u(rows[1], "concurrency"), 2u);
  for (const auto& row : rows) {
    EXPECT_EQ(u(row, "requests"), 3u);
    EXPECT_EQ(u(row, "failed"), 3u);
    EXPECT_EQ(u(row, "output_tokens"), 0u);
    EXPECT_EQ(num(row, "requests_per_s"), 0.0);
  }
}

TEST(BenchCli, HttpModeAgainstAServedSyntheticModelTimesEveryToken) {
  // The synthetic file's built-in tokenizer lets `deltaserve serve` load it, and its visible
  // filler tokens give every generated token an SSE event: nothing fails, every token counts.
  ds::test::ServerProcess server({"--model", tiny_model(), "--port", "0", "--max-context", "1024"});
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  const CmdResult r = run(kBin + "/deltaserve-bench --http " + url +
                          " --concurrency 1,2 --requests 4 --prompt-tokens 16 --max-tokens 8 --vocab 2048 -o json");
  ASSERT_EQ(r.status, 0) << r.output << server.log();
  const auto rows = json_lines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  for (const auto& row : rows) {
    EXPECT_EQ(u(row, "failed"), 0u) << r.output << server.log();
    EXPECT_EQ(u(row, "output_tokens"), 4u * 8u);
    EXPECT_GT(num(row, "ttft_ms_p50"), 0.0);
    EXPECT_GE(num(row, "ttft_ms_p99"), num(row, "ttft_ms_p50"));
    EXPECT_GE(num(row, "itl_ms_p99"), num(row, "itl_ms_p50"));
    EXPECT_GT(num(row, "output_tok_per_s"), 0.0);
  }
}

struct BadFlag {
  std::string args;
  std::string error;
};

TEST(BenchCli, BadFlagsGiveAClearError) {
  const std::string m = " -m " + tiny_model();
  const std::vector<BadFlag> cases = {
      {m + " -o xml", "--output must be table or json, got 'xml'"},
      {m + " --workers 0", "--workers needs an integer in [1, 64], got '0'"},
      {m + " -b 0", "-b needs an integer >= 1, got '0'"},
      {m + " -p 12,,x", "-p needs an integer >= 1"},
      {m + " -n", "-n needs a value"},
      {m + " -x 3", "unknown argument '-x'"},
      {m + " --prefill-precision fp16", "--prefill-precision must be bf16 or f32, got 'fp16'"},
      {m + " --kv-cache-type q4_0", "--kv-cache-type must be one of f32, bf16, f16, q8_0, fp8, q4r, got 'q4_0'"},
      {m + " --kv-cache-type-k F16", "--kv-cache-type-k must be one of f32, bf16, f16, q8_0, fp8, q4r, got 'F16'"},
      {m + " --kv-cache-type-v", "--kv-cache-type-v needs a value"},
      {m + " --devices 0,1", "--devices places worker processes: give --workers N"},
      {m + " --workers 2 --devices 0", "--devices must name one GPU per worker: 1 for --workers 2"},
      {m + " --workers 2 --devices 0,0,1", "--devices must name one GPU per worker: 3 for --workers 2"},
      {m + " --workers 2 --devices 0,gpu1", "--devices needs an integer in [0, 255], got 'gpu1'"},
      {m + " --workers 2 --devices 0,-1", "--devices needs an integer in [0, 255], got '-1'"},
      {m + " --workers 2 --devices 0,,1", "--devices needs an integer in [0, 255], got ''"},
      {" -p 16", "--model is required"},
      {m + " --parallel 0", "--parallel needs an integer in [1, 1024], got '0'"},
      {m + " --parallel 1,eight", "--parallel needs an integer in [1, 1024], got 'eight'"},
      {m + " --parallel 1025", "--parallel needs an integer in [1, 1024], got '1025'"},
      {m + " --parallel -4", "--parallel needs an integer in [1, 1024], got '-4'"},
      {m + " --parallel", "--parallel needs a value"},
      {m + " --parallel 1,8 -n 0", "--parallel N > 1 times batched decode steps: --gen must be >= 1"},
      {m + " --parallel 8 --spec-k 2", "--spec-k runs with the single-sequence rows: include 1 in --parallel"},
      {m + " --peak-gbps 0", "--peak-gbps needs an integer in [1, 1000000], got '0'"},
      {m + " --workers 2 --decode-groups 0", "--decode-groups needs an integer in [1, 8], got '0'"},
      {m + " --workers 2 --decode-groups 9", "--decode-groups needs an integer in [1, 8], got '9'"},
      {m + " --decode-groups 2", "--decode-groups splits batched decode over worker processes: give --workers N"},
      {m + " --ablate pdl,bogus",
       "--ablate: unknown name 'bogus' (valid: cublaslt, device-digest, fused-decode-ops, "
       "stacked-weights, gdn-tensor-cores, prefill-fusions, split-small, q8-split, pdl)"},
      {m + " --ablate pdl", "--ablate switches the in-process CUDA stage's kernels: give --backend cuda"},
      // Retired flags and the old aliases are gone (their choices are constants or --ablate names).
      {m + " --dequant v1", "unknown argument '--dequant'"},
      {m + " --gdn-prep v2", "unknown argument '--gdn-prep'"},
      {m + " --mma-prequant-min 1", "unknown argument '--mma-prequant-min'"},
      {m + " --small-gemm int8", "unknown argument '--small-gemm'"},
      {m + " --no-small-batch-mma", "unknown argument '--no-small-batch-mma'"},
      {m + " --chunk 16", "unknown argument '--chunk'"},
      {m + " --f32-prefill", "unknown argument '--f32-prefill'"},
      {m + " --no-pdl", "unknown argument '--no-pdl'"},
      {" --http", "--url needs a value"},
      {" --http https://127.0.0.1:8080", "--url must start with http://"},
      {" --http http://127.0.0.1", "--url needs http://HOST:PORT"},
      {" --http http://example.com:80", "--url host must be an IPv4 address or localhost"},
      {" --http http://127.0.0.1:8080 -o csv", "--output must be table or json, got 'csv'"},
      {" --http http://127.0.0.1:99999", "--url port needs an integer in [1, 65535], got '99999'"},
      {" --http http://127.0.0.1:8080 --vocab 1", "--vocab needs an integer in [2, 16777216], got '1'"},
  };
  for (const BadFlag& c : cases) {
    const CmdResult r = run(kBin + "/deltaserve-bench" + c.args + " 2>&1");
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.error), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find("usage:"), std::string::npos) << c.args;
  }
  for (const char* h : {" --help", " -h", " -m x.gguf --help"}) {  // usage on stdout, success
    const CmdResult help = run(kBin + "/deltaserve-bench" + std::string(h) + " 2>/dev/null");
    EXPECT_EQ(help.status, 0) << h;
    EXPECT_EQ(help.output.rfind("usage: deltaserve-bench ", 0), 0u) << h << "\n" << help.output;
  }
  const CmdResult missing = run(kBin + "/deltaserve-bench -m /nonexistent.gguf 2>&1");  // a runtime error, not usage
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("deltaserve-bench: cannot open '/nonexistent.gguf'"), std::string::npos)
      << missing.output;
}

}  // namespace
