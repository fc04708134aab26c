#include "coordinator/http/metrics.h"

#include <cstdio>

namespace ds {

namespace {

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void header(std::string& out, std::string_view name, std::string_view help, std::string_view type) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void sample(std::string& out, std::string_view name, std::string_view labels, double value) {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(format_double(value)).append("\n");
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, std::string_view name, std::string_view help) const {
  std::lock_guard<std::mutex> lock(mu_);
  header(out, name, help, "histogram");
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    sample(out, bucket, "le=\"" + format_double(bounds_[i]) + "\"", static_cast<double>(cumulative));
  }
  sample(out, bucket, "le=\"+Inf\"", static_cast<double>(count_));
  sample(out, std::string(name) + "_sum", "", sum_);
  sample(out, std::string(name) + "_count", "", static_cast<double>(count_));
}

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0}),
      itl_({0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
            5.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0}) {}

void ServerMetrics::record_status(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++by_status_[status];
}

void ServerMetrics::add_prompt_tokens(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += n;
}

void ServerMetrics::add_generation_tokens(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  generation_tokens_ += n;
}

void ServerMetrics::record_finished(std::string_view finish_reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++by_finish_reason_[std::string(finish_reason)];
}

void ServerMetrics::observe_time_to_first_token(double seconds) {
  ttft_.observe(seconds);
}
void ServerMetrics::observe_inter_token_latency(double seconds) {
  itl_.observe(seconds);
}
void ServerMetrics::observe_e2e_latency(double seconds) {
  e2e_.observe(seconds);
}

uint64_t ServerMetrics::status_count(int status) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_status_.find(status);
  return it == by_status_.end() ? 0 : it->second;
}

std::string ServerMetrics::render(const EngineHealth& health) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    header(out, "deltaserve:http_requests_total", "HTTP replies by status code.", "counter");
    for (const auto& [status, n] : by_status_) {
      sample(out, "deltaserve:http_requests_total", "status=\"" + std::to_string(status) + "\"",
             static_cast<double>(n));
    }
    header(out, "deltaserve:request_success_total", "Finished generations by finish reason.", "counter");
    for (const auto& [reason, n] : by_finish_reason_) {
      sample(out, "deltaserve:request_success_total", "finished_reason=\"" + reason + "\"", static_cast<double>(n));
    }
    header(out, "deltaserve:prompt_tokens_total", "Prefill tokens processed.", "counter");
    sample(out, "deltaserve:prompt_tokens_total", "", static_cast<double>(prompt_tokens_));
    header(out, "deltaserve:generation_tokens_total", "Tokens generated.", "counter");
    sample(out, "deltaserve:generation_tokens_total", "", static_cast<double>(generation_tokens_));
  }
  ttft_.render(out, "deltaserve:time_to_first_token_seconds",
               "Time from request arrival to the first generated token.");
  itl_.render(out, "deltaserve:inter_token_latency_seconds", "Time between consecutive tokens.");
  e2e_.render(out, "deltaserve:e2e_request_latency_seconds", "Request arrival to last token.");

  header(out, "deltaserve:num_requests_waiting", "Requests queued in the engine.", "gauge");
  sample(out, "deltaserve:num_requests_waiting", "", health.queue_depth);
  header(out, "deltaserve:num_requests_running", "Requests generating.", "gauge");
  sample(out, "deltaserve:num_requests_running", "", health.running);
  header(out, "deltaserve:workers_total", "Configured worker processes.", "gauge");
  sample(out, "deltaserve:workers_total", "", health.workers_total);
  header(out, "deltaserve:workers_up", "Workers in the Ready state.", "gauge");
  sample(out, "deltaserve:workers_up", "", health.workers_ready);
  header(out, "deltaserve:worker_restarts_total", "Worker restarts since start.", "counter");
  sample(out, "deltaserve:worker_restarts_total", "", static_cast<double>(health.worker_restarts));
  header(out, "deltaserve:prefix_cache_queried_tokens_total", "Prompt tokens looked up in the prefix cache.",
         "counter");
  sample(out, "deltaserve:prefix_cache_queried_tokens_total", "",
         static_cast<double>(health.prefix_cache_queried_tokens));
  header(out, "deltaserve:prefix_cache_hit_tokens_total", "Prompt tokens reused from the prefix cache.", "counter");
  sample(out, "deltaserve:prefix_cache_hit_tokens_total", "", static_cast<double>(health.prefix_cache_hit_tokens));
  header(out, "deltaserve:kv_blocks_total", "KV cache blocks the workers hold.", "gauge");
  sample(out, "deltaserve:kv_blocks_total", "", health.kv_blocks_total);
  header(out, "deltaserve:kv_blocks_used", "KV cache blocks held by live sequences.", "gauge");
  sample(out, "deltaserve:kv_blocks_used", "", health.kv_blocks_used);
  header(out, "deltaserve:kv_cache_info", "The KV cache's element type (label; 1).", "gauge");
  sample(out, "deltaserve:kv_cache_info", "type=\"" + health.kv_cache_type + "\"", 1);
  header(out, "deltaserve:kv_cache_bytes_per_token", "One token's K and V over every attention layer, as stored.",
         "gauge");
  sample(out, "deltaserve:kv_cache_bytes_per_token", "", static_cast<double>(health.kv_bytes_per_token));
  header(out, "deltaserve:kv_cache_capacity_bytes", "Bytes of the KV blocks the workers hold.", "gauge");
  sample(out, "deltaserve:kv_cache_capacity_bytes", "",
         static_cast<double>(health.kv_bytes_per_token) * health.kv_blocks_total * health.kv_block_size);
  header(out, "deltaserve:kv_cache_usage_perc", "Fraction of the KV cache blocks in use (0..1).", "gauge");
  sample(out, "deltaserve:kv_cache_usage_perc", "",
         health.kv_blocks_total ? static_cast<double>(health.kv_blocks_used) / health.kv_blocks_total : 0.0);
  header(out, "deltaserve:gdn_slots_total", "GDN recurrent state slots.", "gauge");
  sample(out, "deltaserve:gdn_slots_total", "", health.slots_total);
  header(out, "deltaserve:gdn_slots_used", "GDN recurrent state slots held by live sequences.", "gauge");
  sample(out, "deltaserve:gdn_slots_used", "", health.slots_used);
  header(out, "deltaserve:num_preemptions_total", "Sequences preempted (to be recomputed) since start.", "counter");
  sample(out, "deltaserve:num_preemptions_total", "", static_cast<double>(health.preemptions));
  header(out, "deltaserve:spec_drafted_tokens_total", "MTP draft tokens sent for verification.", "counter");
  sample(out, "deltaserve:spec_drafted_tokens_total", "", static_cast<double>(health.spec.drafted));
  header(out, "deltaserve:spec_accepted_tokens_total", "MTP draft tokens accepted by the target.", "counter");
  sample(out, "deltaserve:spec_accepted_tokens_total", "", static_cast<double>(health.spec.accepted));
  header(out, "deltaserve:spec_verify_steps_total", "Sequence steps that verified drafts.", "counter");
  sample(out, "deltaserve:spec_verify_steps_total", "", static_cast<double>(health.spec.steps));
  header(out, "deltaserve:spec_mean_accepted_length",
         "Tokens emitted per verify step since start (accepted drafts + 1; 0 before the first).", "gauge");
  sample(out, "deltaserve:spec_mean_accepted_length", "", health.spec.mean_accepted_length());
  header(out, "deltaserve:engine_steps_total", "Steps the engine collected from the workers.", "counter");
  sample(out, "deltaserve:engine_steps_total", "", static_cast<double>(health.steps));
  header(out, "deltaserve:engine_host_seconds_total",
         "Engine loop time planning steps and delivering their tokens (the workers may idle meanwhile).", "counter");
  sample(out, "deltaserve:engine_host_seconds_total", "", health.step_host_seconds);
  header(out, "deltaserve:engine_wait_seconds_total", "Engine loop time waiting for step results.", "counter");
  sample(out, "deltaserve:engine_wait_seconds_total", "", health.step_wait_seconds);
  header(out, "deltaserve:engine_ready", "1 when every worker is Ready.", "gauge");
  sample(out, "deltaserve:engine_ready", "", health.ready ? 1 : 0);
  return out;
}

}  // namespace ds
