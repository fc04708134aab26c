// Command-line parsing of the worker daemon (see worker_options.h). Flags take the forms
// `--name value` and `--name=value`.
#include "worker/daemon/worker_options.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "common/byte_size.h"
#include "common/option_file.h"

extern char** environ;

namespace ds {
namespace {

constexpr const char* kUsage =
    "usage: deltaserve-worker --coordinator ENDPOINT --rank R [--backend cpu|cuda] [--device N]\n"
    "                         [--threads T] [--heartbeat-ms MS] [--hostname HOST] [--gpu-memory-fraction F]\n"
    "                         [--memory-budget SIZE] [--gpu-workspace-reserve SIZE] [--log-format text|json]\n"
    "                         [--prefill-precision bf16|f32] [--prefill-gemm cublaslt|mma]\n"
    "                         [--bf16-weight-copy off|on|auto] [--decode-gemv auto|dp4a|mma] [--busy-poll-us US]\n"
    "  --coordinator   coordinator control endpoint (ipc://PATH or tcp://HOST:PORT)\n"
    "  --rank          pipeline stage index, 0-based\n"
    "  --backend       cpu (default) or cuda\n"
    "  --device        GPU index for the cuda backend\n"
    "  --threads       compute threads (default 1)\n"
    "  --heartbeat-ms  heartbeat period (default 200)\n"
    "  --hostname      host other stages reach this worker at (tcp; default: gethostname)\n"
    "  --config        a file of `name = value` lines (also DELTASERVE_WORKER_CONFIG)\n"
    "  --gpu-memory-fraction  share of the GPU memory for weights + KV/state pools (default 0.9)\n"
    "  --memory-budget SIZE  most bytes for the KV/state pools, e.g. 512M, 8G (default: cpu\n"
    "                  min(4G, RAM/4); cuda: only the GPU budget)\n"
    "  --gpu-workspace-reserve SIZE  cuda: device memory kept free for step workspaces (default 2G)\n"
    "  --log-format    text (default) or json: one JSON object per stderr line\n"
    "  --hidden-transport  auto (default: shared-memory ring to a next stage on this host) or inline\n"
    "  --early-handoff on|host|off  stage 0 sends a ring chunk's descriptor before its rows land\n"
    "                  (its device marks the slot; default on: the next stage's device waits on\n"
    "                  the mark; host: the next stage's host does, then queues its work)\n"
    "  --prefill-precision  cuda: bf16 (default: tensor cores, f32 accumulation) or f32 (SIMT);\n"
    "                  the cpu backend accepts both and always computes in f32\n"
    "  --prefill-gemm  cuda: GEMM of the bf16 prefill products: cublaslt (default) or mma\n"
    "  --bf16-weight-copy  cuda: keep bf16 copies of the Q8_0 matrices for bf16 prefill (~1.9x\n"
    "                  their bytes, taken from the pool budget): off (default), on, or auto (on\n"
    "                  only when the KV/state pools lose nothing to it)\n"
    "  --decode-gemv   cuda: GEMV of decode steps and verify rows: dp4a (fastest at one token), mma\n"
    "                  (int8 tensor cores: 1..4 tokens at one token's cost) or auto (default: mma\n"
    "                  when the server speculates or the model is wider than 4096, else dp4a)\n"
    "  --busy-poll-us  after each message, poll this long without sleeping (default -1 = auto:\n"
    "                  5000 on cuda, 0 on cpu)\n"
    "Every option can also be set as DELTASERVE_WORKER_<NAME> (e.g. DELTASERVE_WORKER_RANK=1);\n"
    "precedence: flag > environment > config file > default.\n";

template <typename T>
bool parse_number(const std::string& s, T* out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

std::string local_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

using Setter = std::function<bool(const std::string&)>;

std::map<std::string, Setter> worker_setters(WorkerOptions* o) {
  return {
      {"coordinator", [o](const std::string& v) { o->coordinator = v; return !v.empty(); }},
      {"rank", [o](const std::string& v) { return parse_number(v, &o->rank); }},
      {"backend", [o](const std::string& v) { o->backend = v; return v == "cpu" || v == "cuda"; }},
      {"device", [o](const std::string& v) { return parse_number(v, &o->device); }},
      {"threads", [o](const std::string& v) { return parse_number(v, &o->threads) && o->threads >= 1; }},
      {"heartbeat-ms", [o](const std::string& v) { return parse_number(v, &o->heartbeat_ms) && o->heartbeat_ms >= 10; }},
      {"hostname", [o](const std::string& v) { o->hostname = v; return !v.empty(); }},
      {"log-format", [o](const std::string& v) { o->log_format = v; return v == "text" || v == "json"; }},
      {"hidden-transport", [o](const std::string& v) { o->hidden_transport = v; return v == "auto" || v == "inline"; }},
      {"early-handoff", [o](const std::string& v) { o->early_handoff = v; return v == "on" || v == "host" || v == "off"; }},
      {"prefill-precision", [o](const std::string& v) { o->prefill_precision = v; return v == "bf16" || v == "f32"; }},
      {"prefill-gemm", [o](const std::string& v) { o->prefill_gemm = v; return v == "cublaslt" || v == "mma"; }},
      {"bf16-weight-copy", [o](const std::string& v) {
         o->bf16_weight_copy = v;
         return v == "off" || v == "on" || v == "auto";
       }},
      {"decode-gemv", [o](const std::string& v) {
         o->decode_gemv = v;
         return v == "auto" || v == "dp4a" || v == "mma";
       }},
      {"busy-poll-us", [o](const std::string& v) {
         return parse_number(v, &o->busy_poll_us) && o->busy_poll_us >= -1 && o->busy_poll_us <= 1000000;
       }},
      {"memory-budget", [o](const std::string& v) { return parse_byte_size(v, &o->memory_budget_bytes) && o->memory_budget_bytes > 0; }},
      {"gpu-workspace-reserve", [o](const std::string& v) { return parse_byte_size(v, &o->gpu_workspace_reserve_bytes); }},
      {"gpu-memory-fraction", [o](const std::string& v) {
         return parse_number(v, &o->gpu_memory_fraction) && o->gpu_memory_fraction > 0 && o->gpu_memory_fraction <= 1;
       }},
  };
}


bool apply(const std::map<std::string, Setter>& setters, const std::string& name, const std::string& value,
           const std::string& where, std::string* error) {
  const auto it = setters.find(name);
  if (it == setters.end() || !it->second(value)) {
    *error = where + ": bad option or value: " + name + " '" + value + "'\n" + kUsage;
    return false;
  }
  return true;
}

// --config FILE: `name = value` lines, `#` comments (lowest precedence after defaults).
bool read_config(const std::string& path, const std::map<std::string, Setter>& setters, std::set<std::string>* seen,
                 std::string* error) {
  return read_option_file(
      path, [&](const std::string& name, const std::string& value, const std::string& where) {
        seen->insert(name);
        return apply(setters, name, value, where, error);
      },
      error);
}

// DELTASERVE_WORKER_<NAME> variables (e.g. DELTASERVE_WORKER_RANK=1): the worker's own prefix,
// so the coordinator's DELTASERVE_* settings, which spawned workers inherit, never leak in.
bool read_environment(const std::map<std::string, Setter>& setters, std::set<std::string>* seen, std::string* error) {
  const std::string prefix = "DELTASERVE_WORKER_";
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (kv.rfind(prefix, 0) != 0 || eq == std::string::npos) continue;
    const std::string name = option_name_of_variable(kv.substr(0, eq), prefix);
    if (name == "config") continue;
    if (!apply(setters, name, kv.substr(eq + 1), "environment " + kv.substr(0, eq), error)) return false;
    seen->insert(name);
  }
  return true;
}

}  // namespace

bool parse_worker_options(int argc, char** argv, WorkerOptions* out, std::string* error, bool* help) {
  const std::map<std::string, Setter> setters = worker_setters(out);
  *help = false;
  std::vector<std::pair<std::string, std::string>> flags;
  std::string config;
  if (const char* c = std::getenv("DELTASERVE_WORKER_CONFIG")) config = c;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      *help = true;
      *error = kUsage;
      return false;
    }
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    }
    if (arg.rfind("--", 0) != 0) {
      *error = "unexpected argument '" + arg + "'\n" + kUsage;
      return false;
    }
    if (arg == "--config") {
      config = value;
    } else {
      flags.emplace_back(arg.substr(2), value);
    }
  }
  // Precedence: defaults < config file < environment < flags.
  std::set<std::string> seen;
  if (!config.empty() && !read_config(config, setters, &seen, error)) return false;
  if (!read_environment(setters, &seen, error)) return false;
  for (const auto& [name, value] : flags) {
    if (!apply(setters, name, value, "--" + name, error)) return false;
    seen.insert(name);
  }
  if (out->coordinator.empty() || !seen.count("rank")) {
    *error = std::string("--coordinator and --rank are required (flag, DELTASERVE_WORKER_* or --config)\n") + kUsage;
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
  std::ostringstream s;
  s << "rank=" << o.rank << " coordinator=" << o.coordinator << " backend=" << o.backend << " device=" << o.device
    << " threads=" << o.threads << " heartbeat_ms=" << o.heartbeat_ms << " host=" << o.hostname << " memory_budget="
    << (o.memory_budget_bytes ? format_bytes(o.memory_budget_bytes) : std::string("default")) << " log_format=" << o.log_format
    << " hidden_transport=" << o.hidden_transport << " early_handoff=" << o.early_handoff
    << " prefill_precision=" << o.prefill_precision << " prefill_gemm=" << o.prefill_gemm
    << " bf16_weight_copy=" << o.bf16_weight_copy << " decode_gemv=" << o.decode_gemv
    << " busy_poll_us=" << busy_poll_window_us(o);
  return s.str();
}

int busy_poll_window_us(const WorkerOptions& o) {
  if (o.busy_poll_us >= 0) return o.busy_poll_us;
  return o.backend == "cuda" ? 5000 : 0;
}

}  // namespace ds
