#include "tools/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ds::bench {
namespace {

// The batched decode fields (n_parallel > 1): step time at the mean rate, bytes per step, limit.
void batch_fields(std::string& out, const ReportRow& row, const RateStats& st) {
  const double n = static_cast<double>(row.n_parallel);
  json_field(out, "n_parallel", std::to_string(row.n_parallel));
  json_field(out, "step_ms", json_number(st.avg_ts > 0 ? n * 1e3 / st.avg_ts : 0));
  json_field(out, "gb_per_step", row.gb_per_token > 0 ? json_number(row.gb_per_token * n) : "null");
  json_field(out, "limit_ts", row.limit_ts > 0 ? json_number(row.limit_ts) : "null");
  json_field(out, "limit_fraction", row.limit_ts > 0 ? json_number(st.avg_ts / row.limit_ts) : "null");
}

}  // namespace

void json_field(std::string& out, const char* key, const std::string& json_value) {
  if (out.size() > 1) out += ", ";
  out += std::string("\"") + key + "\": " + json_value;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Finite numbers as %.6g; JSON has no inf / nan, so those become null.
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

RateStats rate_stats(const ReportRow& row) {
  RateStats r;
  for (double s : row.seconds) r.samples_ts.push_back(s > 0 ? static_cast<double>(row.tokens) / s : 0.0);
  if (r.samples_ts.empty()) return r;
  double sum = 0;
  for (double t : r.samples_ts) sum += t;
  const double n = static_cast<double>(r.samples_ts.size());
  r.avg_ts = sum / n;
  double sq = 0;
  for (double t : r.samples_ts) sq += (t - r.avg_ts) * (t - r.avg_ts);
  r.stddev_ts = r.samples_ts.size() > 1 ? std::sqrt(sq / (n - 1)) : 0.0;
  r.best_ts = *std::max_element(r.samples_ts.begin(), r.samples_ts.end());
  return r;
}

std::string json_row(const ReportContext& ctx, const ReportRow& row) {
  const RateStats st = rate_stats(row);
  const double mean_s = st.avg_ts > 0 ? static_cast<double>(row.tokens) / st.avg_ts : 0;  // run time at the mean rate
  std::string out = "{";
  json_field(out, "model", json_string(ctx.model));
  json_field(out, "backend", json_string(ctx.backend));
  json_field(out, "test", json_string(row.test));
  json_field(out, "n_prompt", std::to_string(row.n_prompt));
  json_field(out, "n_gen", std::to_string(row.n_gen));
  json_field(out, "n_depth", std::to_string(row.n_depth));
  json_field(out, "n_batch", std::to_string(ctx.batch));
  json_field(out, "n_workers", std::to_string(ctx.workers));
  json_field(out, "n_threads", std::to_string(ctx.threads));
  json_field(out, "type_k", json_string(ctx.type_k));
  json_field(out, "type_v", json_string(ctx.type_v));
  json_field(out, "repetitions", std::to_string(row.seconds.size()));
  json_field(out, "tokens", std::to_string(row.tokens));
  json_field(out, "steps", std::to_string(row.steps));
  json_field(out, "avg_ts", json_number(st.avg_ts));
  json_field(out, "stddev_ts", json_number(st.stddev_ts));
  json_field(out, "best_ts", json_number(st.best_ts));
  json_field(out, "ms_per_token", json_number(st.avg_ts > 0 ? 1e3 / st.avg_ts : 0));
  json_field(out, "gb_per_s", row.gb_per_token > 0 ? json_number(row.gb_per_token * st.avg_ts) : "null");
  json_field(out, "tflop_per_s",
             row.flop_per_run > 0 && mean_s > 0 ? json_number(row.flop_per_run / mean_s * 1e-12) : "null");
  if (row.n_parallel > 1) batch_fields(out, row, st);
  std::string samples = "[";
  for (size_t i = 0; i < st.samples_ts.size(); ++i) samples += (i ? ", " : "") + json_number(st.samples_ts[i]);
  json_field(out, "samples_ts", samples + "]");
  return out + "}";
}

}  // namespace ds::bench
