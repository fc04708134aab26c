// Option parsing of `deltaserve serve` (see serve_options.h). One table of named setters is
// shared by the config file, the environment and the command line, so every option is
// settable all three ways with the same validation.
#include "coordinator/app/serve_options.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>
#include <vector>

#include "common/byte_size.h"
#include "common/option_file.h"

extern char** environ;

namespace ds {
namespace {

constexpr const char* kUsage =
    "usage: deltaserve serve --model F.gguf [options]\n"
    "  --config FILE          read `name = value` lines (lowest precedence after defaults)\n"
    "  --model F.gguf         the GGUF model (qwen35)\n"
    "  --workers N            pipeline stages, one worker process each (default 1)\n"
    "  --backend cpu|cuda     worker backend (default cpu)\n"
    "  --threads T            compute threads per CPU worker (default 1)\n"
    "  --layer-split a,b,...  layers per stage (default: balanced by weight bytes)\n"
    "  --devices a,b,...      cuda: GPU of each local worker (default: worker r on GPU r)\n"
    "  --external-workers     do not start workers (systemd starts them); needs --control-endpoint\n"
    "  --control-endpoint EP  ipc://PATH or tcp://HOST:PORT the workers connect to\n"
    "  --max-context N        tokens per sequence, prompt + output (default min(model, 32768))\n"
    "  --max-batch-tokens N   token budget of one step (default 2048)\n"
    "  --max-seqs N           concurrent sequences (default 32)\n"
    "  --block-size N         KV cache block size in tokens (default 16)\n"
    "  --kv-blocks N          KV blocks (default: max-seqs full contexts)\n"
    "  --prefix-cache-snapshots N  GDN state snapshots for the prefix cache (default 2 x max-seqs, 0 = off)\n"
    "  --spec-k K             MTP speculative decoding: drafts verified per step, 0..4 (default 0 = off)\n"
    "  --draft-vocab N        drafts pick among token ids below N only (a draft reads that part of the\n"
    "                         LM head); 0 = all (default). Output is unchanged, acceptance may drop\n"
    "  --host H / --port P    HTTP address (default 127.0.0.1:8000)\n"
    "  --api-key KEY          require `Authorization: Bearer KEY` (all routes but /health)\n"
    "  --served-model-name S  model id in the API (default: the GGUF file name)\n"
    "  --max-body BYTES       request body limit (default 33554432)\n"
    "  --io-threads N         HTTP I/O threads (default 2)\n"
    "  --max-queue N          answer 429 while N requests wait in the engine (default 256, 0 = no limit)\n"
    "  --request-threads N    threads that parse, render and tokenize requests (default 4)\n"
    "  --shutdown-grace S     on SIGTERM, seconds running requests may still finish (default 30);\n"
    "                         streams still open then end with an error event and [DONE]\n"
    "  --gpu-memory-fraction F  cuda workers: share of GPU memory for weights + pools (default 0.9),\n"
    "                         split by layer count among workers on one GPU (--devices 0,0)\n"
    "  --memory-budget SIZE   each worker's KV/state pools at most SIZE, e.g. 8G (default: cpu\n"
    "                         min(4G, RAM/4); cuda: what the GPU share leaves after the weights)\n"
    "  --startup-timeout S    seconds to wait for every worker to be Ready (default 120)\n"
    "  --hidden-transport auto|inline  hidden states between same-host workers: shared-memory ring\n"
    "                         (auto, default; tcp:// stays inline) or always inline in the message\n"
    "  --early-handoff on|host|off  stage 0 hands a ring chunk to stage 1 before its rows land\n"
    "                         (its GPU marks the slot; default on: stage 1's GPU waits on the mark;\n"
    "                         host: stage 1's host waits, then queues its kernels)\n"
    "  --busy-poll auto|on|off  wait for step results without sleeping (default auto: on with cuda\n"
    "                         workers, costing one busy core while serving; off with cpu workers)\n"
    "  --mps off|auto|on      cuda workers sharing a GPU run under a private CUDA MPS daemon that\n"
    "                         serve starts and stops (one GPU context: no context switch per hop);\n"
    "                         default auto: when no MPS daemon serves this process already; on:\n"
    "                         always; a daemon left by a killed server is quit at the next start\n"
    "  --micro-batches N      cut each batched step into up to N micro-batches in flight across the\n"
    "                         stages (default 1 = off; for stages on different GPUs)\n"
    "  --pipeline-depth N     plans in flight at once, so a long prompt's chunks pipeline over the\n"
    "                         workers (default 0 = min(workers + 1, 4); 1 = off)\n"
    "  --decode-groups N|auto running sequences decode in N groups that take turns, so workers on\n"
    "                         different devices decode at once (auto: 2 for cuda workers on two\n"
    "                         or more GPUs, or cpu workers whose threads fit the cores; else 1 =\n"
    "                         off; at most 8)\n"
    "  --prefill-precision bf16|f32  cuda workers' prefill products + attention: bf16 tensor cores\n"
    "                         (the workers' default) or f32 SIMT; cpu workers always compute f32\n"
    "  --prefill-gemm cublaslt|mma  cuda workers' bf16 prefill GEMM (workers' default: cublaslt)\n"
    "  --bf16-weight-copy off|on|auto  cuda workers: persistent bf16 weight copies for prefill,\n"
    "                         paid from the pool budget (auto: only when the pools lose nothing)\n"
    "  --decode-gemv auto|dp4a|mma  cuda workers' GEMV of decode steps and verify rows: dp4a\n"
    "                         (fastest at one token on 9B), mma (int8 tensor cores: a 1+3 verify\n"
    "                         row at ~1.15x a decode step; 27B decode 13% faster, 9B ~6% slower);\n"
    "                         auto (workers' default): mma when --spec-k > 0 or the model is wider\n"
    "                         than 4096, else dp4a\n"
    "  --log-format text|json\n"
    "Every option can also be set as DELTASERVE_<NAME> (e.g. DELTASERVE_API_KEY) or in --config.\n";

template <typename T>
bool parse_number(const std::string& s, T* out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

template <typename T>
bool parse_positive(const std::string& s, T* out) {
  return parse_number(s, out) && *out > 0;
}

bool parse_counts(const std::string& s, std::vector<uint32_t>* out) {
  std::stringstream in(s);
  std::string item;
  out->clear();
  while (std::getline(in, item, ',')) {
    uint32_t v = 0;
    if (!parse_positive(item, &v)) return false;
    out->push_back(v);
  }
  return !out->empty();
}

bool parse_bool(const std::string& s, bool* out) {
  if (s.empty() || s == "1" || s == "true" || s == "yes") return *out = true, true;
  if (s == "0" || s == "false" || s == "no") return *out = false, true;
  return false;
}

using Setter = std::function<bool(const std::string&)>;

std::map<std::string, Setter> setters(ServeOptions* o) {
  EngineOptions* e = &o->engine;
  ServerOptions* h = &o->http;
  return {
      {"model", [e](const std::string& v) { e->model_path = v; return !v.empty(); }},
      {"workers", [e](const std::string& v) { return parse_positive(v, &e->n_workers); }},
      {"backend", [e](const std::string& v) { e->backend = v; return v == "cpu" || v == "cuda"; }},
      {"threads", [e](const std::string& v) { return parse_positive(v, &e->threads_per_worker); }},
      {"layer-split", [e](const std::string& v) { return parse_counts(v, &e->layer_split); }},
      {"devices", [e](const std::string& v) {  // e.g. 0,0: two workers sharing GPU 0
         e->devices.clear();
         std::stringstream in(v);
         for (std::string item; std::getline(in, item, ',');) {
           int d = -1;
           if (!parse_number(item, &d) || d < 0) return false;
           e->devices.push_back(d);
         }
         return !e->devices.empty();
       }},
      {"external-workers", [e](const std::string& v) { return parse_bool(v, &e->external_workers); }},
      {"control-endpoint", [e](const std::string& v) { e->control_endpoint = v; return !v.empty(); }},
      {"max-context", [e](const std::string& v) { return parse_positive(v, &e->max_context); }},
      {"max-batch-tokens", [o](const std::string& v) { return parse_positive(v, &o->max_batch_tokens); }},
      {"max-seqs", [o](const std::string& v) { return parse_positive(v, &o->max_seqs); }},
      {"block-size", [o](const std::string& v) { return parse_positive(v, &o->block_size); }},
      {"kv-blocks", [o](const std::string& v) { return parse_positive(v, &o->kv_blocks); }},
      {"prefix-cache-snapshots",
       [o](const std::string& v) {
         uint32_t n = 0;
         if (!parse_number(v, &n)) return false;
         o->prefix_cache_snapshots = n;
         return true;
       }},
      {"spec-k", [o](const std::string& v) { return parse_number(v, &o->spec_k) && o->spec_k <= 4; }},
      {"draft-vocab", [o](const std::string& v) { return parse_number(v, &o->draft_vocab); }},
      {"host", [h](const std::string& v) { h->host = v; return !v.empty(); }},
      {"port", [h](const std::string& v) { return parse_number(v, &h->port); }},
      {"api-key", [h](const std::string& v) { h->api_key = v; return true; }},
      {"served-model-name", [h](const std::string& v) { h->served_model_name = v; return !v.empty(); }},
      {"max-body", [h](const std::string& v) { return parse_positive(v, &h->max_body_bytes); }},
      {"io-threads", [h](const std::string& v) { return parse_positive(v, &h->io_threads); }},
      {"max-queue", [h](const std::string& v) { return parse_number(v, &h->max_queue); }},
      {"request-threads", [h](const std::string& v) { return parse_positive(v, &h->request_threads) && h->request_threads <= 256; }},
      {"shutdown-grace", [h](const std::string& v) {
         uint32_t s = 0;
         if (!parse_number(v, &s) || s > 3600) return false;
         h->shutdown_grace = std::chrono::milliseconds(int64_t{s} * 1000);
         return true;
       }},
      {"gpu-memory-fraction", [e](const std::string& v) {
         double f = 0;
         if (!parse_number(v, &f) || f <= 0 || f > 1) return false;
         e->gpu_memory_fraction = f;  // the engine splits it among workers sharing a GPU (gpu_share.h)
         return true;
       }},
      {"memory-budget", [e](const std::string& v) {  // validated here, applied by each worker
         uint64_t bytes = 0;
         if (!parse_byte_size(v, &bytes) || bytes == 0) return false;
         e->worker_extra_args.insert(e->worker_extra_args.end(), {"--memory-budget", v});
         return true;
       }},
      {"hidden-transport", [e](const std::string& v) { e->hidden_transport = v; return v == "auto" || v == "inline"; }},
      {"early-handoff", [e](const std::string& v) { e->early_handoff = v; return v == "on" || v == "host" || v == "off"; }},
      {"micro-batches", [e](const std::string& v) { return parse_positive(v, &e->micro_batches); }},
      {"busy-poll", [e](const std::string& v) { e->busy_poll = v; return v == "auto" || v == "on" || v == "off"; }},
      {"mps", [e](const std::string& v) { e->mps = v; return v == "auto" || v == "on" || v == "off"; }},
      {"pipeline-depth", [o](const std::string& v) { return parse_number(v, &o->pipeline_depth); }},
      {"decode-groups", [o](const std::string& v) {
         if (v == "auto") {
           o->decode_groups = 0;
           return true;
         }
         return parse_positive(v, &o->decode_groups) && o->decode_groups <= 8;
       }},
      {"prefill-precision", [o](const std::string& v) {  // passed to the workers by parse_serve_options
         o->prefill_precision = v;
         return v == "bf16" || v == "f32";
       }},
      {"prefill-gemm", [o](const std::string& v) {  // passed to the workers by parse_serve_options
         o->prefill_gemm = v;
         return v == "cublaslt" || v == "mma";
       }},
      {"bf16-weight-copy", [o](const std::string& v) {  // passed to the workers by parse_serve_options
         o->bf16_weight_copy = v;
         return v == "off" || v == "on" || v == "auto";
       }},
      {"decode-gemv", [o](const std::string& v) {  // passed to the workers by parse_serve_options
         o->decode_gemv = v;
         return v == "auto" || v == "dp4a" || v == "mma";
       }},
      {"startup-timeout", [e](const std::string& v) {
         uint32_t s = 0;
         if (!parse_positive(v, &s)) return false;
         e->startup_timeout_ms = static_cast<int>(std::min<uint32_t>(s, 86400) * 1000);
         return true;
       }},
      {"log-format", [o](const std::string& v) { o->log_format = v; return v == "text" || v == "json"; }},
  };
}

bool apply(const std::map<std::string, Setter>& table, const std::string& name, const std::string& value,
           const std::string& where, std::string* error) {
  const auto it = table.find(name);
  if (it == table.end()) {
    *error = where + ": unknown option '" + name + "'\n" + kUsage;
    return false;
  }
  if (!it->second(value)) {
    *error = where + ": bad value '" + (name == "api-key" ? std::string("***") : value) + "' for " + name + "\n" + kUsage;
    return false;
  }
  return true;
}

bool read_config(const std::string& path, const std::map<std::string, Setter>& table, std::string* error) {
  return read_option_file(
      path, [&](const std::string& name, const std::string& value, const std::string& where) {
        return apply(table, name, value, where, error);
      },
      error);
}

struct Flag {
  std::string name, value;
};

// Splits argv into flags; a flag without `=` takes the next argument unless it is a switch.
bool split_flags(int argc, char** argv, std::vector<Flag>* flags, std::string* config, bool* help, std::string* error) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      *help = true;
      *error = kUsage;
      return false;
    }
    if (arg.rfind("--", 0) != 0) {
      *error = "unexpected argument '" + arg + "'\n" + kUsage;
      return false;
    }
    arg = arg.substr(2);
    Flag f;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      f = {arg.substr(0, eq), arg.substr(eq + 1)};
    } else if (arg == "external-workers") {
      f = {arg, "true"};
    } else if (i + 1 < argc) {
      f = {arg, argv[++i]};
    } else {
      *error = "--" + arg + " needs a value\n" + kUsage;
      return false;
    }
    if (f.name == "config") {
      *config = f.value;
    } else {
      flags->push_back(f);
    }
  }
  return true;
}

bool check_consistency(const ServeOptions& o, std::string* error) {
  if (o.engine.model_path.empty()) {
    *error = std::string("--model is required\n") + kUsage;
  } else if (!o.engine.layer_split.empty() && o.engine.layer_split.size() != o.engine.n_workers) {
    *error = "--layer-split must name one layer count per worker";
  } else if (!o.engine.devices.empty() && o.engine.devices.size() != o.engine.n_workers) {
    *error = "--devices must name one GPU per worker";
  } else if (o.engine.external_workers && o.engine.control_endpoint.empty()) {
    *error = "--external-workers needs --control-endpoint (the address the workers connect to)";
  } else {
    return true;
  }
  return false;
}

}  // namespace

std::map<std::string, std::string> deltaserve_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("DELTASERVE_", 0) != 0) continue;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

bool parse_serve_options(int argc, char** argv, const std::map<std::string, std::string>& env, ServeOptions* out,
                         std::string* error, bool* help) {
  *help = false;
  out->http.served_model_name.clear();  // default: the GGUF file name, filled by the caller
  const std::map<std::string, Setter> table = setters(out);
  std::vector<Flag> flags;
  std::string config;
  if (!split_flags(argc, argv, &flags, &config, help, error)) return false;
  if (config.empty() && env.count("DELTASERVE_CONFIG")) config = env.at("DELTASERVE_CONFIG");
  if (!config.empty() && !read_config(config, table, error)) return false;
  for (const auto& [var, value] : env) {
    if (var == "DELTASERVE_CONFIG" || var.rfind("DELTASERVE_", 0) != 0) continue;
    const std::string name = option_name_of_variable(var, "DELTASERVE_");
    if (table.count(name) && !apply(table, name, value, "environment " + var, error)) return false;
  }
  for (const Flag& f : flags) {
    if (!apply(table, f.name, f.value, "--" + f.name, error)) return false;
  }
  // Appended once the layers are merged (one flag, the winning value); as a flag it also beats
  // DELTASERVE_WORKER_PREFILL_PRECISION in the environment the workers inherit.
  const std::pair<const char*, const std::optional<std::string>*> passed[] = {
      {"--prefill-precision", &out->prefill_precision},
      {"--prefill-gemm", &out->prefill_gemm},
      {"--bf16-weight-copy", &out->bf16_weight_copy},
      {"--decode-gemv", &out->decode_gemv}};
  for (const auto& [flag, value] : passed) {
    if (*value) out->engine.worker_extra_args.insert(out->engine.worker_extra_args.end(), {flag, **value});
  }
  return check_consistency(*out, error);
}

std::string describe(const ServeOptions& o) {
  std::ostringstream s;
  const EngineOptions& e = o.engine;
  s << "model=" << e.model_path << " workers=" << e.n_workers << " backend=" << e.backend
    << " threads=" << e.threads_per_worker << " external_workers=" << (e.external_workers ? "yes" : "no")
    << " control=" << (e.control_endpoint.empty() ? "(private ipc)" : e.control_endpoint)
    << " hidden_transport=" << e.hidden_transport << " early_handoff=" << e.early_handoff << " micro_batches=" << e.micro_batches << " busy_poll=" << e.busy_poll << " mps=" << e.mps << " pipeline_depth=" << o.pipeline_depth
    << " decode_groups=" << (o.decode_groups ? std::to_string(o.decode_groups) : std::string("auto"))
    << " max_context=" << (e.max_context ? std::to_string(e.max_context) : std::string("auto"))
    << " max_batch_tokens=" << o.max_batch_tokens << " max_seqs=" << o.max_seqs << " block_size=" << o.block_size
    << " kv_blocks=" << (o.kv_blocks ? std::to_string(o.kv_blocks) : std::string("auto"))
    << " prefix_cache_snapshots="
    << (o.prefix_cache_snapshots ? std::to_string(*o.prefix_cache_snapshots) : std::string("auto"))
    << " spec_k=" << o.spec_k << " draft_vocab=" << o.draft_vocab << " prefill_precision=" << o.prefill_precision.value_or("(worker default)")
    << " prefill_gemm=" << o.prefill_gemm.value_or("(worker default)")
    << " bf16_weight_copy=" << o.bf16_weight_copy.value_or("(worker default)")
    << " decode_gemv=" << o.decode_gemv.value_or("(worker default)")
    << " http=" << o.http.host
    << ":" << o.http.port << " api_key=" << (o.http.api_key.empty() ? "(none)" : "***")
    << " served_model_name=" << o.http.served_model_name << " max_body=" << o.http.max_body_bytes
    << " log_format=" << o.log_format;
  return s.str();
}

}  // namespace ds
