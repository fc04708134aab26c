// `deltaserve serve --prefill-precision` end to end (2 CPU workers): the value reaches every
// worker in Assign (each logs what it applies: "settings from the coordinator: prefill_precision=f32
// ..."), not through its command line, and a bad value stops start-up before anything is spawned.
// CPU workers accept the setting and compute in f32 either way; the cuda effect of bf16 vs f32 is
// CudaBackendOptions::bf16_prefill, tested by the kernel and model parity tests.
#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/e2e/server_process.h"
#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

// Lines of a server log holding `needle`.
std::vector<std::string> lines_with(const std::string& log, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(needle) != std::string::npos) out.push_back(line);
  }
  return out;
}

TEST(PrefillPrecisionE2E, ServeSendsItToEveryWorkerInAssign) {
  ServerProcess server({"--model", tiny_model_path(), "--workers", "2", "--port", "0", "--prefill-precision", "f32"});
  const std::vector<std::string> applied = lines_with(server.log(), "settings from the coordinator:");
  ASSERT_EQ(applied.size(), 2u) << server.log();
  for (const std::string& line : applied) {
    EXPECT_NE(line.find("prefill_precision=f32"), std::string::npos) << line;  // the workers' default is bf16
  }
  for (const std::string& line : lines_with(server.log(), "starting: rank=")) {
    EXPECT_EQ(line.find("--prefill-precision"), std::string::npos) << "not on the worker's command line: " << line;
  }
  const HttpReply r =
      post_completion(server.port(), R"({"prompt": [9707, 11, 1879], "max_tokens": 4, "temperature": 0})");
  EXPECT_EQ(r.status, 200) << r.body;
}

// --bf16-weight-copy / --decode-gemv / --memory-budget (cuda workers' persistent bf16 copy, decode
// GEMV, the pools' budget) travel the same way; cpu workers accept and ignore the first two (the
// copy's budget check is cuda-only).
TEST(PrefillPrecisionE2E, Bf16WeightCopyDecodeGemvAndBudgetReachEveryWorker) {
  ServerProcess server({"--model", tiny_model_path(), "--workers", "2", "--port", "0", "--bf16-weight-copy", "auto",
                        "--decode-gemv", "mma", "--memory-budget", "512M"});
  const std::vector<std::string> applied = lines_with(server.log(), "settings from the coordinator:");
  ASSERT_EQ(applied.size(), 2u) << server.log();
  for (const std::string& line : applied) {
    EXPECT_NE(line.find("decode_gemv=mma bf16_weight_copy=auto pool_budget=512.00 MiB"), std::string::npos) << line;
  }
  const HttpReply r =
      post_completion(server.port(), R"({"prompt": [9707, 11, 1879], "max_tokens": 4, "temperature": 0})");
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(PrefillPrecisionE2E, BadDecodeGemvIsRejectedBeforeAnythingStarts) {
  try {
    ServerProcess server({"--model", tiny_model_path(), "--port", "0", "--decode-gemv", "tensor"});
    FAIL() << "started with --decode-gemv tensor";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad value 'tensor' for decode-gemv"), std::string::npos) << m;
    EXPECT_EQ(m.find("starting: rank="), std::string::npos) << m;
  }
}

TEST(PrefillPrecisionE2E, BadValueIsRejectedBeforeAnythingStarts) {
  try {
    ServerProcess server({"--model", tiny_model_path(), "--port", "0", "--prefill-precision", "fp16"});
    FAIL() << "started with --prefill-precision fp16";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad value 'fp16' for prefill-precision"), std::string::npos) << m;
    EXPECT_EQ(m.find("starting: rank="), std::string::npos) << m;  // no worker was started
  }
}

}  // namespace
}  // namespace ds::test
