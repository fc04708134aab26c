// Option parsing of `deltaserve serve` (see serve_options.h). One table (common/options.h) gives
// the flags, DELTASERVE_* variables, the config file, --help and describe(), so every option is
// settable all three ways with the same validation and shows in the start-up line.
#include "coordinator/app/serve_options.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/byte_size.h"
#include "common/options.h"
#include "coordinator/http/upstream_proxy.h"
#include "coordinator/media/remote_url.h"  // normalize_media_domain

namespace ds {
namespace {

template <typename T>
bool parse_number(const std::string& s, T* out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

template <typename T>
bool parse_positive(const std::string& s, T* out) {
  return parse_number(s, out) && *out > 0;
}

template <typename T>
std::string shown(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
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

bool parse_devices(const std::string& v, std::vector<int>* out) {
  out->clear();
  std::stringstream in(v);
  for (std::string item; std::getline(in, item, ',');) {
    int d = -1;
    if (!parse_number(item, &d) || d < 0) return false;
    out->push_back(d);
  }
  return !out->empty();
}

template <typename T>
std::string joined(const std::vector<T>& v, const std::string& none) {
  if (v.empty()) return none;
  std::string out;
  for (const T& x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

std::string value_name_of(const std::vector<std::string>& allowed) {
  std::string out;
  for (const std::string& a : allowed) out += (out.empty() ? "" : "|") + a;
  return out;
}

bool allowed_value(const std::vector<std::string>& allowed, const std::string& v) {
  return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

// A string option that takes one of `allowed`.
OptionSpec choice(const std::string& name, std::string* field, std::vector<std::string> allowed,
                  const std::string& help) {
  return {name, value_name_of(allowed), help,
          [field, allowed](const std::string& v) {
            *field = v;
            return allowed_value(allowed, v);
          },
          [field] { return *field; }};
}

// A cuda worker setting serve validates and passes on (parse_serve_options); unset, the workers
// keep their own default.
// A workers' setting serve sends in Assign; unset, `fallback` is sent.
OptionSpec worker_choice(const std::string& name, std::optional<std::string>* field, std::vector<std::string> allowed,
                         const std::string& fallback, const std::string& help) {
  return {name,
          value_name_of(allowed),
          help,
          [field, allowed](const std::string& v) {
            *field = v;
            return allowed_value(allowed, v);
          },
          [field, fallback] { return field->value_or(fallback); },
          fallback};
}

bool parse_fraction(const std::string& v, std::optional<double>* out) {
  double f = 0;
  if (!parse_number(v, &f) || f <= 0 || f > 1) return false;
  *out = f;
  return true;
}

// The options of one side model (--embed-*, --rerank-*).
std::vector<OptionSpec> side_model_specs(const std::string& kind, const std::string& what, SideModelOptions* m) {
  return {
      {kind + "-model", "F.gguf", "also serve " + what + " model (its routes, its own workers); chat servers only",
       [m](const std::string& v) {
         m->model_path = v;
         return !v.empty();
       },
       [m] { return m->model_path.empty() ? std::string("(none)") : m->model_path; }, "none"},
      {kind + "-workers", "N", "pipeline stages of the " + kind + " model",
       [m](const std::string& v) { return parse_positive(v, &m->n_workers); }, [m] { return shown(m->n_workers); }},
      {kind + "-devices", "a,b,...", "cuda: GPU of each " + kind + " worker",
       [m](const std::string& v) { return parse_devices(v, &m->devices); }, [m] { return joined(m->devices, "auto"); },
       "worker r on GPU r"},
      {kind + "-gpu-memory-fraction", "F", "cuda: the " + kind + " workers' share of their GPUs, in (0, 1]",
       [m](const std::string& v) { return parse_fraction(v, &m->gpu_memory_fraction); },
       [m] { return m->gpu_memory_fraction ? shown(*m->gpu_memory_fraction) : std::string("auto"); }, "0.9"},
      {kind + "-model-name", "S", "the " + kind + " model's id in the API",
       [m](const std::string& v) {
         m->served_model_name = v;
         return !v.empty();
       },
       [m] { return m->served_model_name.empty() ? std::string("(file name)") : m->served_model_name; },
       "its GGUF file name"},
  };
}

// "a,b,,c" as given, empty entries kept (check_media_domains refuses them); "" is no entry.
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  for (size_t comma = s.find(','); comma != std::string::npos; comma = s.find(',', start)) {
    out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  out.push_back(s.substr(start));
  return out;
}

std::string joined_strings(const std::vector<std::string>& v, const std::string& none) {
  if (v.empty()) return none;
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : ",") + x;
  return out;
}

// Seconds, fractions allowed, as whole milliseconds (at least 1).
bool parse_seconds(const std::string& s, double max_seconds, std::chrono::milliseconds* out) {
  double seconds = 0;
  if (!parse_number(s, &seconds) || !(seconds > 0) || seconds > max_seconds) return false;
  *out = std::chrono::milliseconds(std::max<long long>(1, std::llround(seconds * 1000)));
  return true;
}

// The remote-image flags (coordinator/media/http_fetch.h): which hosts, and how long a download.
std::vector<OptionSpec> remote_media_specs(VisionOptions* v) {
  return {
      {"allowed-media-domains", "H1,H2,...",
       "http(s):// image URLs may name these hosts (off without it): example.com exactly,\n"
       "*.example.com its subdomains, an IP literal that address even when private; a name that\n"
       "resolves to a private or loopback address is refused",
       [v](const std::string& s) {
         v->allowed_media_domains = split_commas(s);
         return true;  // each entry is checked in check_media_domains, which says what is wrong
       },
       [v] { return joined_strings(v->allowed_media_domains, "(off)"); }, "off"},
      {"media-fetch-timeout", "S", "seconds one remote image's whole download may take",
       [v](const std::string& s) { return parse_seconds(s, 3600, &v->media_fetch_timeout); },
       [v] { return shown(static_cast<double>(v->media_fetch_timeout.count()) / 1000); }},
  };
}

// Vision input (issue 31): the mmproj and how image parts are read and sized.
std::vector<OptionSpec> vision_specs(EngineOptions* e, VisionOptions* v) {
  return {
      {"mmproj", "F.gguf", "the vision tower (llama.cpp's mmproj GGUF): chat requests may carry images",
       [e](const std::string& s) {
         e->mmproj_path = s;
         return !s.empty();
       },
       [e] { return e->mmproj_path.empty() ? std::string("(none)") : e->mmproj_path; }, "none"},
      {"media-path", "DIR", "file:// image URLs may read files under DIR (off without it)",
       [v](const std::string& s) {
         v->media_root = s;
         return !s.empty();
       },
       [v] { return v->media_root.empty() ? std::string("(off)") : v->media_root; }, "off"},
      {"image-min-tokens", "N", "images smaller than N tokens are scaled up (a token is 32x32 pixels)",
       [v](const std::string& s) { return parse_positive(s, &v->image_min_tokens); },
       [v] { return shown(v->image_min_tokens); }},
      {"image-max-tokens", "N", "images larger than N tokens are scaled down (HF's bound: 16384)",
       [v](const std::string& s) { return parse_positive(s, &v->image_max_tokens) && v->image_max_tokens <= 65536; },
       [v] { return shown(v->image_max_tokens); }},
      {"max-images-per-request", "N", "the most images one request may carry",
       [v](const std::string& s) { return parse_positive(s, &v->max_images_per_request); },
       [v] { return shown(v->max_images_per_request); }},
  };
}

OptionSpec upstream_spec(const std::string& kind, const std::string& routes, std::string* url) {
  return {kind + "-upstream",
          "URL",
          "forward " + routes + " to the server at URL (http://host:port[/base])",
          [url](const std::string& v) {
            *url = v;
            return !v.empty();
          },
          [url] { return url->empty() ? std::string("(none)") : *url; },
          "none"};
}

// Every option of `deltaserve serve`, bound to `o`. The order is the help's and describe()'s.
OptionTable serve_table(ServeOptions* o) {
  EngineOptions* e = &o->engine;
  ServerOptions* h = &o->http;
  OptionTable table = {
      {"model", "F.gguf", "the GGUF model (qwen35; required)",
       [e](const std::string& v) {
         e->model_path = v;
         return !v.empty();
       },
       [e] { return e->model_path; }, "-"},
      {"workers", "N", "pipeline stages, one worker process each",
       [e](const std::string& v) { return parse_positive(v, &e->n_workers); }, [e] { return shown(e->n_workers); }},
      choice("backend", &e->backend, {"cpu", "cuda"}, "worker backend"),
      {"threads", "T", "compute threads per CPU worker",
       [e](const std::string& v) { return parse_positive(v, &e->threads_per_worker); },
       [e] { return shown(e->threads_per_worker); }},
      {"layer-split", "a,b,...", "layers per stage",
       [e](const std::string& v) { return parse_counts(v, &e->layer_split); },
       [e] { return joined(e->layer_split, "balanced"); }, "balanced by weight bytes"},
      {"devices", "a,b,...", "cuda: GPU of each local worker (0,0: two workers sharing GPU 0)",
       [e](const std::string& v) { return parse_devices(v, &e->devices); }, [e] { return joined(e->devices, "auto"); },
       "worker r on GPU r"},
      {"external-workers", "", "do not start workers (systemd starts them); needs --control-endpoint",
       [e](const std::string& v) { return parse_bool(v, &e->external_workers); },
       [e] { return std::string(e->external_workers ? "yes" : "no"); }},
      {"control-endpoint", "EP", "ipc://PATH or tcp://HOST:PORT the workers connect to",
       [e](const std::string& v) {
         e->control_endpoint = v;
         return !v.empty();
       },
       [e] { return e->control_endpoint.empty() ? std::string("(private ipc)") : e->control_endpoint; },
       "a private ipc:// directory"},
      {"max-context", "N", "tokens per sequence, prompt + output",
       [e](const std::string& v) { return parse_positive(v, &e->max_context); },
       [e] { return e->max_context ? shown(e->max_context) : std::string("auto"); }, "min(model, 32768)"},
      {"max-batch-tokens", "N", "token budget of one step (decode rows + prefill chunks)",
       [o](const std::string& v) { return parse_positive(v, &o->max_batch_tokens); },
       [o] { return o->max_batch_tokens ? shown(o->max_batch_tokens) : std::string("auto"); },
       "2048 (chat), 16384 (embed, rerank)"},
      {"max-seqs", "N", "concurrent sequences", [o](const std::string& v) { return parse_positive(v, &o->max_seqs); },
       [o] { return shown(o->max_seqs); }},
      {"block-size", "N", "KV cache block size in tokens",
       [o](const std::string& v) { return parse_positive(v, &o->block_size); }, [o] { return shown(o->block_size); }},
      {"kv-blocks", "N", "KV blocks", [o](const std::string& v) { return parse_positive(v, &o->kv_blocks); },
       [o] { return o->kv_blocks ? shown(o->kv_blocks) : std::string("auto"); }, "max-seqs full contexts"},
      {"prefix-cache-snapshots", "N", "GDN state snapshots for the prefix cache (0 = off)",
       [o](const std::string& v) {
         uint32_t n = 0;
         if (!parse_number(v, &n)) return false;
         o->prefix_cache_snapshots = n;
         return true;
       },
       [o] { return o->prefix_cache_snapshots ? shown(*o->prefix_cache_snapshots) : std::string("auto"); },
       "2 x max-seqs"},
      {"spec-k", "K", "MTP speculative decoding: drafts verified per step, 0..4 (0 = off)",
       [o](const std::string& v) { return parse_number(v, &o->spec_k) && o->spec_k <= 4; },
       [o] { return shown(o->spec_k); }},
      {"draft-vocab", "N",
       "drafts pick among token ids below N only (a draft reads that part of the LM head);\n"
       "0 = all. Output is unchanged, acceptance may drop",
       [o](const std::string& v) { return parse_number(v, &o->draft_vocab); }, [o] { return shown(o->draft_vocab); }},
      {"host", "H", "HTTP address",
       [h](const std::string& v) {
         h->host = v;
         return !v.empty();
       },
       [h] { return h->host; }},
      {"port", "P", "HTTP port (0: an ephemeral one)", [h](const std::string& v) { return parse_number(v, &h->port); },
       [h] { return shown(h->port); }},
      {"api-key", "KEY", "require `Authorization: Bearer KEY` (all routes but /health)",
       [h](const std::string& v) {
         h->api_key = v;
         return true;
       },
       [h] { return h->api_key.empty() ? std::string("(none)") : h->api_key; }, "none", /*secret=*/true},
      {"served-model-name", "S", "model id in the API",
       [h](const std::string& v) {
         h->served_model_name = v;
         return !v.empty();
       },
       [h] { return h->served_model_name; }, "the GGUF file name"},
      {"max-body", "BYTES", "request body limit",
       [h](const std::string& v) { return parse_positive(v, &h->max_body_bytes); },
       [h] { return shown(h->max_body_bytes); }},
      {"io-threads", "N", "HTTP I/O threads", [h](const std::string& v) { return parse_positive(v, &h->io_threads); },
       [h] { return shown(h->io_threads); }},
      {"max-queue", "N", "answer 429 while N requests wait in the engine (0 = no limit)",
       [h](const std::string& v) { return parse_number(v, &h->max_queue); }, [h] { return shown(h->max_queue); }},
      {"max-n", "N", "the largest n (choices per request) accepted, 1..128",
       [h](const std::string& v) { return parse_positive(v, &h->max_n) && h->max_n <= 128; },
       [h] { return shown(h->max_n); }},
      {"request-threads", "N", "threads that parse, render and tokenize requests, 1..256",
       [h](const std::string& v) { return parse_positive(v, &h->request_threads) && h->request_threads <= 256; },
       [h] { return shown(h->request_threads); }},
      {"shutdown-grace", "S",
       "on SIGTERM, seconds running requests may still finish (at most 3600); streams still\n"
       "open then end with an error event and [DONE]",
       [h](const std::string& v) {
         uint32_t s = 0;
         if (!parse_number(v, &s) || s > 3600) return false;
         h->shutdown_grace = std::chrono::milliseconds(int64_t{s} * 1000);
         return true;
       },
       [h] { return shown(h->shutdown_grace.count() / 1000); }},
      {"gpu-memory-fraction", "F",
       "cuda workers: share of GPU memory for weights + pools, in (0, 1], split by layer count\n"
       "among workers on one GPU (--devices 0,0)",
       [e](const std::string& v) {
         return parse_fraction(v, &e->gpu_memory_fraction);  // split among workers sharing a GPU (gpu_share.h)
       },
       [e] { return e->gpu_memory_fraction ? shown(*e->gpu_memory_fraction) : std::string("auto"); }, "0.9"},
      {"memory-budget", "SIZE", "each worker's KV/state pools at most SIZE, e.g. 8G",
       [o](const std::string& v) {  // validated here, applied by each worker (parse_serve_options)
         uint64_t bytes = 0;
         o->memory_budget = v;
         return parse_byte_size(v, &bytes) && bytes != 0;
       },
       [o] { return o->memory_budget.value_or("(each worker's own)"); },
       "cpu min(4G, RAM/4); cuda: what the GPU share leaves after the weights"},
      {"startup-timeout", "S", "seconds to wait for every worker to be Ready",
       [e](const std::string& v) {
         uint32_t s = 0;
         if (!parse_positive(v, &s)) return false;
         e->startup_timeout_ms = static_cast<int>(std::min<uint32_t>(s, 86400) * 1000);
         return true;
       },
       [e] { return shown(e->startup_timeout_ms / 1000); }},
      choice("hidden-transport", &e->hidden_transport, {"auto", "inline"},
             "hidden states between same-host workers: a shared-memory ring (auto; tcp:// stays\n"
             "inline) or always inline in the message"),
      choice("early-handoff", &e->early_handoff, {"on", "host", "off"},
             "stage 0 hands a ring chunk to stage 1 before its rows land (its GPU marks the slot;\n"
             "on: stage 1's GPU waits on the mark; host: stage 1's host waits, then queues its kernels)"),
      choice("busy-poll", &e->busy_poll, {"auto", "on", "off"},
             "wait for step results without sleeping (auto: on with cuda workers, costing one busy\n"
             "core while serving; off with cpu workers)"),
      choice("mps", &e->mps, {"auto", "on", "off"},
             "cuda workers sharing a GPU run under a private CUDA MPS daemon that serve starts and\n"
             "stops (one GPU context: no context switch per hop); auto: when no MPS daemon serves\n"
             "this process already; on: always; a daemon left by a killed server is quit at the next start"),
      {"pipeline-depth", "N",
       "plans in flight at once, so a long prompt's chunks pipeline over the workers\n"
       "(0 = min(workers + 1, 4); 1 = off)",
       [o](const std::string& v) { return parse_number(v, &o->pipeline_depth); },
       [o] { return shown(o->pipeline_depth); }},
      {"decode-groups", "N|auto",
       "running sequences decode in N groups that take turns, so workers on different devices\n"
       "decode at once (auto: 2 for cuda workers on two or more GPUs, or cpu workers whose\n"
       "threads fit the cores; else 1 = off; at most 8)",
       [o](const std::string& v) {
         if (v == "auto") {
           o->decode_groups = 0;
           return true;
         }
         return parse_positive(v, &o->decode_groups) && o->decode_groups <= 8;
       },
       [o] { return o->decode_groups ? shown(o->decode_groups) : std::string("auto"); }},
      worker_choice("prefill-precision", &o->prefill_precision, {"bf16", "f32"}, "bf16",
                    "cuda workers' prefill products + attention: bf16 tensor cores or f32 SIMT; cpu workers\n"
                    "always compute f32 (sent to every worker in Assign, over its own flags)"),
      worker_choice("bf16-weight-copy", &o->bf16_weight_copy, {"off", "on", "auto"}, "off",
                    "cuda workers: persistent bf16 weight copies for prefill, paid from the pool budget\n"
                    "(auto: only when the pools lose nothing; sent in Assign)"),
      worker_choice("decode-gemv", &o->decode_gemv, {"auto", "dp4a", "mma"}, "auto",
                    "cuda workers' GEMV of decode steps and verify rows: dp4a (fastest at one token on 9B),\n"
                    "mma (int8 tensor cores: a 1+3 verify row at ~1.15x a decode step; 27B decode 13%\n"
                    "faster, 9B ~6% slower); auto: mma when --spec-k > 0 or the model is wider than 4096,\n"
                    "else dp4a (sent in Assign)"),
      choice("log-format", &o->log_format, {"text", "json"}, "log lines as text or one JSON object each"),
      choice("mode", &o->mode, {"auto", "chat", "embed", "rerank"},
             "what the model serves: chat (the generation routes), embed (/v1/embeddings), rerank\n"
             "(/v1/rerank, /rerank, /v2/rerank, /v1/score); auto: the GGUF's pooling type says"),
  };
  // The KV cache types follow --kv-blocks in the help and the start-up line.
  const std::vector<OptionSpec> kv = kv_type_option_specs(&o->kv_cache);
  const auto kv_blocks =
      std::find_if(table.begin(), table.end(), [](const OptionSpec& spec) { return spec.name == "kv-blocks"; });
  table.insert(kv_blocks + 1, kv.begin(), kv.end());
  for (OptionSpec& spec : vision_specs(e, &h->vision)) table.push_back(std::move(spec));
  for (OptionSpec& spec : remote_media_specs(&h->vision)) table.push_back(std::move(spec));
  for (OptionSpec& spec : side_model_specs("embed", "an embedding", &o->embed_model)) table.push_back(std::move(spec));
  for (OptionSpec& spec : side_model_specs("rerank", "a reranker", &o->rerank_model)) table.push_back(std::move(spec));
  table.push_back(upstream_spec("embed", "/v1/embeddings", &o->embed_upstream));
  table.push_back(upstream_spec("rerank", "/v1/rerank, /rerank, /v2/rerank and /v1/score", &o->rerank_upstream));
  table.push_back({"upstream-api-key", "KEY", "the key sent to the upstreams (empty: the client's is forwarded)",
                   [o](const std::string& v) {
                     o->upstream_api_key = v;
                     return true;
                   },
                   [o] { return o->upstream_api_key.empty() ? std::string("(forwarded)") : o->upstream_api_key; },
                   "the client's", /*secret=*/true});
  table.push_back({"upstream-timeout", "S", "seconds an upstream may stay silent before the client gets a 504",
                   [o](const std::string& v) {
                     return parse_positive(v, &o->upstream_timeout_s) && o->upstream_timeout_s <= 86400;
                   },
                   [o] { return shown(o->upstream_timeout_s); }});
  return table;
}

OptionParser serve_parser() {
  OptionParser p;
  p.usage = "usage: deltaserve serve --model F.gguf [options]";
  p.env_prefix = "DELTASERVE_";
  // DELTASERVE_WORKER_* (the workers' own variables) share the prefix: not ours, not errors.
  p.strict_environment = false;
  p.combined_errors = false;
  return p;
}

std::string help_text() {
  ServeOptions defaults;
  return options_help(serve_parser(), serve_table(&defaults));
}

bool check_side_model(const std::string& kind, const SideModelOptions& m, const std::string& upstream,
                      std::string* error) {
  if (!m.model_path.empty() && !upstream.empty()) {
    *error = "--" + kind + "-model and --" + kind + "-upstream both name the " + kind + " model: give one";
  } else if (!m.devices.empty() && m.devices.size() != m.n_workers) {
    *error = "--" + kind + "-devices must name one GPU per --" + kind + "-workers worker";
  } else {
    if (upstream.empty()) return true;
    try {
      parse_upstream_url(upstream);
      return true;
    } catch (const std::invalid_argument& e) {
      *error = "--" + kind + "-upstream: " + e.what();
    }
  }
  return false;
}

// Puts every --allowed-media-domains entry in the form the downloader compares; false (with the
// entry and what is wrong) when one is not a host.
bool check_media_domains(VisionOptions* v, std::string* error) {
  for (std::string& entry : v->allowed_media_domains) {
    try {
      entry = normalize_media_domain(entry);
    } catch (const std::invalid_argument& e) {
      *error = std::string("--allowed-media-domains: ") + e.what();
      return false;
    }
  }
  return true;
}

bool check_consistency(const ServeOptions& o, std::string* error) {
  if (o.engine.model_path.empty()) {
    *error = "--model is required\n" + help_text();
  } else if (!o.engine.layer_split.empty() && o.engine.layer_split.size() != o.engine.n_workers) {
    *error = "--layer-split must name one layer count per worker";
  } else if (!o.engine.devices.empty() && o.engine.devices.size() != o.engine.n_workers) {
    *error = "--devices must name one GPU per worker";
  } else if (o.http.vision.image_min_tokens > o.http.vision.image_max_tokens) {
    *error = "--image-min-tokens is above --image-max-tokens";
  } else if (o.engine.external_workers && o.engine.control_endpoint.empty()) {
    *error = "--external-workers needs --control-endpoint (the address the workers connect to)";
  } else if (!check_side_model("embed", o.embed_model, o.embed_upstream, error) ||
             !check_side_model("rerank", o.rerank_model, o.rerank_upstream, error)) {
    return false;
  } else {
    return true;
  }
  return false;
}

}  // namespace

std::map<std::string, std::string> deltaserve_environment() {
  return environment_with_prefix("DELTASERVE_");
}

bool parse_serve_options(int argc, char** argv, const std::map<std::string, std::string>& env, ServeOptions* out,
                         std::string* error, bool* help) {
  out->http.served_model_name.clear();  // default: the GGUF file name, filled by the caller
  const ParsedOptions r = parse_options(serve_parser(), serve_table(out), argc, argv, env);
  *help = r.help;
  if (!r.ok) {
    *error = r.error;
    return false;
  }
  // Settings that change the workers' numerics or memory travel in Assign (EngineOptions), so
  // workers started elsewhere cannot diverge: every worker gets the server's choice.
  EngineOptions& e = out->engine;
  e.prefill_precision = out->prefill_precision.value_or("bf16");
  e.decode_gemv = out->decode_gemv.value_or("auto");
  e.bf16_weight_copy = out->bf16_weight_copy.value_or("off");
  e.cache.k_type = out->kv_cache.k_type();
  e.cache.v_type = out->kv_cache.v_type();
  e.pool_budget_bytes = 0;
  if (out->memory_budget) parse_byte_size(*out->memory_budget, &e.pool_budget_bytes);  // validated above
  return check_media_domains(&out->http.vision, error) && check_consistency(*out, error);
}

std::string describe(const ServeOptions& o) {
  ServeOptions shown_options = o, defaults;
  defaults.http.served_model_name.clear();
  return options_summary(serve_table(&shown_options), serve_table(&defaults));
}

}  // namespace ds
