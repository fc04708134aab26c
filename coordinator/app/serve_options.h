// Every option of `deltaserve serve`, in one struct, filled in one place from (lowest to
// highest precedence) defaults, a config file (--config FILE: `name = value` lines, `#`
// comments), environment variables (DELTASERVE_<NAME>, e.g. DELTASERVE_PORT=8001,
// DELTASERVE_API_KEY=...) and command-line flags (--name value or --name=value).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/kv_options.h"
#include "coordinator/engine/engine.h"
#include "coordinator/http/server_options.h"

namespace ds {

// A model served beside the main one by the same coordinator (--embed-model, --rerank-model):
// its own workers, on their own devices; everything else as the main model's.
struct SideModelOptions {
  std::string model_path;  // empty: none
  uint32_t n_workers = 1;
  std::vector<int> devices;                   // cuda: GPU of each of its workers; empty = 0, 1, ...
  std::optional<double> gpu_memory_fraction;  // its workers' share of their GPUs; unset: the default
  std::string served_model_name;              // empty: the GGUF file name
};

struct ServeOptions {
  EngineOptions engine;
  ServerOptions http;
  // Token budget of one step (decode rows + prefill chunks); 0 = auto: 2048 for a chat model
  // (a long prefill chunk delays every running stream's next token), 16384 for an embedding or
  // reranker model (its steps are prefill only: 4B embeddings at 64 clients, H200, 56.7K tok/s
  // at 16384 vs 48.2K at 2048 and 55.9K at 32768, docs/PERFORMANCE.md).
  uint32_t max_batch_tokens = 0;
  uint32_t max_seqs = 32;    // live sequences
  uint32_t block_size = 16;  // KV tokens per block
  uint32_t kv_blocks = 0;    // 0: max_seqs full contexts (no over-commit)
  // GDN state snapshot buffers per worker for the hybrid prefix cache; 0 turns the cache off.
  // Unset: 2 per sequence slot (one prompt snapshot + one decode snapshot each).
  std::optional<uint32_t> prefix_cache_snapshots;
  // MTP speculative decoding: drafts per step, 0..4 (0 = off). Default off: the speed-up is
  // not measured yet on a GPU (tools/bench --spec-k), and CPU timings say nothing about it.
  uint32_t spec_k = 0;
  // Drafts pick among token ids below this (the LM head's first rows; a draft then reads that
  // part of the head instead of all of it); 0 = the whole vocabulary. Output is unchanged.
  uint32_t draft_vocab = 0;
  // Plans the engine keeps in flight (BatchEngineOptions::max_plans_in_flight): a long prompt's
  // chunks, and the decode groups; 0 = auto: min(workers + 1, 4) (the workers' ring slots),
  // 1 = off (at least decode_groups).
  uint32_t pipeline_depth = 0;
  // Running sequences decode in this many groups that take turns (SchedulerConfig::
  // decode_groups), so stages on different devices decode at once; 0 = auto (auto_decode_groups:
  // 2 for cuda workers on two or more GPUs or cpu workers whose threads fit the cores, else 1),
  // 1 = off.
  uint32_t decode_groups = 0;
  // The workers' numerics and memory, sent to every worker in Assign (EngineOptions), external
  // ones included, over their own flags:
  // cuda prefill "bf16" (tensor cores, f32 accumulation) or "f32" (SIMT; cpu workers always
  // compute in f32); unset: bf16.
  std::optional<std::string> prefill_precision;
  // Each worker's pool budget (--memory-budget SIZE); unset: each worker's own.
  std::optional<std::string> memory_budget;
  // cuda persistent bf16 weight copy ("off" | "on" | "auto"); unset: off.
  std::optional<std::string> bf16_weight_copy;
  // cuda decode / verify GEMV ("auto" | "dp4a" | "mma"; worker/decode_gemv.h); unset: auto.
  std::optional<std::string> decode_gemv;
  // The KV cache's element types (--kv-cache-type[-k|-v], common/kv_options.h): put into
  // engine.cache, so every worker (and the hosted --embed-model / --rerank-model) gets them.
  KvTypeFlags kv_cache;
  std::string log_format = "text";  // text | json
  // What the model serves: "chat", "embed" (/v1/embeddings), "rerank" (/v1/rerank), or "auto":
  // the GGUF's (qwen3.pooling_type last: embed, rank: rerank, else chat).
  std::string mode = "auto";
  // A chat server's embedding and reranker models (issue 29): hosted here, each with its own
  // workers, or another server's (the routes are forwarded). At most one of the two per kind.
  SideModelOptions embed_model, rerank_model;
  std::string embed_upstream, rerank_upstream;  // http://host:port[/base]
  std::string upstream_api_key;                 // replaces the client's Authorization upstream; empty: forwarded
  uint32_t upstream_timeout_s = 600;            // the longest silence of an upstream
};

// Parses argv (the arguments after "serve") plus `env` (normally the process environment,
// passed in so tests can control it). Returns false with `error` (usage included) on a bad
// flag, value, config line or variable; `help` is set when --help was asked for.
bool parse_serve_options(int argc, char** argv, const std::map<std::string, std::string>& env, ServeOptions* out,
                         std::string* error, bool* help);

// The process environment's DELTASERVE_* variables.
std::map<std::string, std::string> deltaserve_environment();

// One line describing the effective options, secrets masked.
std::string describe(const ServeOptions& options);

}  // namespace ds
