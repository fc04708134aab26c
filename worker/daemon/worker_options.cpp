// Option parsing of the worker daemon (see worker_options.h): one table (common/options.h)
// gives the flags, DELTASERVE_WORKER_* variables, the config file, --help and the start-up line.
#include "worker/daemon/worker_options.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/byte_size.h"
#include "common/options.h"

namespace ds {
namespace {

template <typename T>
bool parse_number(const std::string& s, T* out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

template <typename T>
std::string shown(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// "2.00GiB": format_bytes without its space, so the start-up line stays `key=value` pairs.
std::string compact_bytes(uint64_t bytes) {
  std::string s = format_bytes(bytes);
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  return s;
}

std::string local_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// A string option that takes one of `allowed`.
OptionSpec choice(const std::string& name, std::string* field, std::vector<std::string> allowed,
                  const std::string& help) {
  std::string value_name;
  for (const std::string& a : allowed) value_name += (value_name.empty() ? "" : "|") + a;
  return {name, value_name, help,
          [field, allowed](const std::string& v) {
            *field = v;
            return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
          },
          [field] { return *field; }};
}

// Every worker option, bound to `o`. The order is the help's and the start-up line's.
OptionTable worker_table(WorkerOptions* o) {
  OptionTable table = {
      {"rank", "R", "pipeline stage index, 0-based (required)",
       [o](const std::string& v) { return parse_number(v, &o->rank); }, [o] { return shown(o->rank); }, "-"},
      {"coordinator", "ENDPOINT", "coordinator control endpoint, ipc://PATH or tcp://HOST:PORT (required)",
       [o](const std::string& v) {
         o->coordinator = v;
         return !v.empty();
       },
       [o] { return o->coordinator; }, "-"},
      choice("backend", &o->backend, {"cpu", "cuda"}, "compute backend"),
      {"device", "N", "GPU index for the cuda backend",
       [o](const std::string& v) { return parse_number(v, &o->device); }, [o] { return shown(o->device); }},
      {"threads", "T", "compute threads (Assign.n_threads overrides when non-zero)",
       [o](const std::string& v) { return parse_number(v, &o->threads) && o->threads >= 1; },
       [o] { return shown(o->threads); }},
      {"heartbeat-ms", "MS", "heartbeat period, at least 10",
       [o](const std::string& v) { return parse_number(v, &o->heartbeat_ms) && o->heartbeat_ms >= 10; },
       [o] { return shown(o->heartbeat_ms); }},
      {"hostname", "HOST", "host other stages reach this worker at (tcp data endpoints)",
       [o](const std::string& v) {
         o->hostname = v;
         return !v.empty();
       },
       [o] { return o->hostname; }, "gethostname()"},
      {"gpu-memory-fraction", "F", "cuda: share of the GPU memory for weights + KV/state pools, in (0, 1]",
       [o](const std::string& v) {
         return parse_number(v, &o->gpu_memory_fraction) && o->gpu_memory_fraction > 0 && o->gpu_memory_fraction <= 1;
       },
       [o] { return shown(o->gpu_memory_fraction); }},
      {"memory-budget", "SIZE", "most bytes for the KV/state pools, e.g. 512M, 8G",
       [o](const std::string& v) { return parse_byte_size(v, &o->memory_budget_bytes) && o->memory_budget_bytes > 0; },
       [o] { return o->memory_budget_bytes ? compact_bytes(o->memory_budget_bytes) : std::string("default"); },
       "cpu min(4G, RAM/4); cuda: only the GPU budget"},
      {"gpu-workspace-reserve", "SIZE", "cuda: device memory kept free for step workspaces",
       [o](const std::string& v) { return parse_byte_size(v, &o->gpu_workspace_reserve_bytes); },
       [o] { return compact_bytes(o->gpu_workspace_reserve_bytes); }, "2G"},
      choice("log-format", &o->log_format, {"text", "json"}, "json: one JSON object per stderr line"),
      choice("hidden-transport", &o->hidden_transport, {"auto", "inline"},
             "hidden states to the next stage: auto = a shared-memory ring to a next stage on this host,\n"
             "else inline in the message"),
      choice("early-handoff", &o->early_handoff, {"on", "host", "off"},
             "stage 0 sends a ring chunk's descriptor before its rows land (its device marks the slot;\n"
             "on: the next stage's device waits on the mark; host: the next stage's host does, then\n"
             "queues its work; off: after the rows are in the slot)"),
      choice("prefill-precision", &o->prefill_precision, {"bf16", "f32"},
             "cuda: prefill products + attention on bf16 tensor cores (f32 accumulation) or f32 SIMT;\n"
             "the cpu backend accepts both and always computes in f32"),
      choice("bf16-weight-copy", &o->bf16_weight_copy, {"off", "on", "auto"},
             "cuda: keep bf16 copies of the Q8_0 matrices for bf16 prefill (~1.9x their bytes, taken\n"
             "from the pool budget; auto: only when the KV/state pools lose nothing to it)"),
      choice("decode-gemv", &o->decode_gemv, {"auto", "dp4a", "mma"},
             "cuda: GEMV of decode steps and verify rows: dp4a (fastest at one token), mma (int8 tensor\n"
             "cores: 1..4 tokens at one token's cost), auto: mma when the server speculates or the\n"
             "model is wider than 4096, else dp4a"),
      {"busy-poll-us", "US", "after each message, poll this long without sleeping (-1 = auto: 5000 on cuda, 0 on cpu)",
       [o](const std::string& v) {
         return parse_number(v, &o->busy_poll_us) && o->busy_poll_us >= -1 && o->busy_poll_us <= 1000000;
       },
       [o] { return shown(busy_poll_window_us(*o)); }, "-1"},
  };
  for (OptionSpec& spec : kv_type_option_specs(&o->kv_cache)) table.push_back(std::move(spec));
  return table;
}

OptionParser worker_parser() {
  OptionParser p;
  p.usage = "usage: deltaserve-worker --coordinator ENDPOINT --rank R [options]";
  // The worker's own prefix, so the coordinator's DELTASERVE_* settings, which spawned workers
  // inherit, never leak in; an unknown DELTASERVE_WORKER_* variable is a typo.
  p.env_prefix = "DELTASERVE_WORKER_";
  p.strict_environment = true;
  p.combined_errors = true;
  return p;
}

}  // namespace

bool parse_worker_options(int argc, char** argv, WorkerOptions* out, std::string* error, bool* help) {
  const OptionParser parser = worker_parser();
  const ParsedOptions r = parse_options(parser, worker_table(out), argc > 0 ? argc - 1 : 0, argv + (argc > 0),
                                        environment_with_prefix(parser.env_prefix));
  *help = r.help;
  if (!r.ok) {
    *error = r.error;
    return false;
  }
  if (out->coordinator.empty() || !r.set_by.count("rank")) {
    WorkerOptions defaults;
    *error = "--coordinator and --rank are required (flag, DELTASERVE_WORKER_* or --config)\n" +
             options_help(parser, worker_table(&defaults));
    return false;
  }
  if (out->hostname.empty()) out->hostname = local_hostname();
  return true;
}

uint64_t default_cpu_pool_budget(uint64_t ram) {
  constexpr uint64_t kCap = 4ull << 30;
  return ram == 0 ? kCap : std::min(kCap, ram / 4);
}

uint64_t physical_ram_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

std::string describe(const WorkerOptions& o) {
  WorkerOptions shown = o, defaults;
  return options_summary(worker_table(&shown), worker_table(&defaults));
}

int busy_poll_window_us(const WorkerOptions& o) {
  if (o.busy_poll_us >= 0) return o.busy_poll_us;
  return o.backend == "cuda" ? 5000 : 0;
}

}  // namespace ds
