// deltaserve-bench's machine-readable output (-o json): one JSON object per result row and
// line, llama-bench style. A prompt size gives two rows: "pp" (prefill of n_prompt tokens) and
// "tg" (n_gen one-token decode steps at a context of n_depth = that prompt). Rates are
// tokens/s per repetition; avg_ts / stddev_ts are their mean and sample standard deviation
// (0 with one repetition), as in llama-bench.
// Batched decode (deltaserve-bench --parallel N, N > 1) gives "tg" rows with n_parallel = N:
// every step advances N sequences, so tokens = N * steps and the rates are aggregate; these
// rows (only these) add n_parallel, step_ms (at the mean rate), gb_per_step and, when the
// device's bandwidth is known, limit_ts (aggregate tok/s at the step's byte limit) and
// limit_fraction (avg_ts / limit_ts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ds::bench {

struct ReportContext {
  std::string model;
  std::string backend;
  size_t batch = 0;      // prefill tokens per step as run (the prompt length when unchunked)
  uint32_t workers = 0;  // 0: in-process
  int threads = 0;
  std::string type_k = "f32", type_v = "f32";  // the KV cache's element types (llama-bench's type_k / type_v)
};

struct ReportRow {
  std::string test;  // "pp" | "tg"
  size_t n_prompt = 0;
  size_t n_gen = 0;
  size_t n_depth = 0;           // context already cached before the timed tokens
  size_t tokens = 0;            // tokens fed per repetition, as counted by the runner
  size_t steps = 0;             // forward steps per repetition
  std::vector<double> seconds;  // one per repetition
  double gb_per_token = 0;      // bytes one decode token streams (GB); 0: not reported
  double flop_per_run = 0;      // FLOPs of one repetition; 0: not reported
  size_t n_parallel = 1;        // sequences per decode step; > 1: a batched decode row
  double limit_ts = 0;          // batched: aggregate tok/s at the byte limit; 0: not reported
};

struct RateStats {
  double avg_ts = 0;
  double stddev_ts = 0;
  double best_ts = 0;
  std::vector<double> samples_ts;
};

RateStats rate_stats(const ReportRow& row);

// JSON text of a string (quoted, escaped) and of a number (%.6g; null for inf / nan).
std::string json_string(const std::string& s);
std::string json_number(double v);
// Appends `"key": json_value` to an object under construction (`out` starts with "{").
void json_field(std::string& out, const char* key, const std::string& json_value);

// The row as one line of JSON (no trailing newline).
std::string json_row(const ReportContext& ctx, const ReportRow& row);

}  // namespace ds::bench
