// Prometheus metrics of the front door (GET /metrics, text exposition format 0.0.4). Names
// follow vLLM's with a `deltaserve:` prefix so existing dashboards map over. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/serving/generation.h"

namespace ds {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void observe(double value);
  void render(std::string& out, std::string_view name, std::string_view help) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void record_status(int status);  // every HTTP reply, including errors below the router
  void add_prompt_tokens(uint64_t n);
  void add_generation_tokens(uint64_t n);
  void record_finished(std::string_view finish_reason);  // "stop", "length", "tool_calls", ...
  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  void observe_e2e_latency(double seconds);

  // Counters plus the engine's gauges (queue depth, running, workers) sampled now.
  std::string render(const EngineHealth& health) const;

  uint64_t status_count(int status) const;  // for tests

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> by_status_;
  std::map<std::string, uint64_t> by_finish_reason_;
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
};

}  // namespace ds
