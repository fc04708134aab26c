// Every runtime switch of the worker daemon, filled in one place from (lowest to highest
// precedence) defaults, a config file (--config FILE or DELTASERVE_WORKER_CONFIG), environment
// variables (DELTASERVE_WORKER_<NAME>) and flags, through one option table (common/options.h).
#pragma once

#include <cstdint>
#include <string>

#include "common/kv_options.h"

namespace ds {

struct WorkerOptions {
  std::string coordinator;           // control endpoint of the coordinator (ipc://... or tcp://...)
  uint32_t rank = 0;                 // pipeline position this worker serves
  std::string backend = "cpu";       // "cpu" or "cuda"
  int device = -1;                   // GPU index (cuda); -1 on cpu
  int threads = 1;                   // compute threads (Assign.n_threads overrides when non-zero)
  int heartbeat_ms = 200;            // heartbeat period
  std::string hostname;              // advertised host for tcp data endpoints (default: gethostname)
  double gpu_memory_fraction = 0.9;  // cuda: share of the GPU's memory weights + caches may use
  // cuda: device memory left free for the model's step workspace (activations, logits) and
  // small control buffers, which grow with the step size after the pools are allocated.
  uint64_t gpu_workspace_reserve_bytes = 2ull << 30;
  // The most bytes the KV / GDN state pools may take. 0 = the default: on cpu a quarter of
  // physical RAM, at most 4 GiB (default_cpu_pool_budget); on cuda no cap beyond the GPU budget.
  uint64_t memory_budget_bytes = 0;
  std::string log_format = "text";  // text | json (see common/log.h)
  // Hidden states to the next stage: "auto" = a shared-memory ring when it is on this host
  // (ipc:// data endpoint), inline in the ZeroMQ message otherwise; "inline" = always inline.
  std::string hidden_transport = "auto";
  // "on" (default): stage 0 sends a ring chunk's descriptor as soon as its work is queued and its
  // device marks the slot when the rows have landed, so the next stage queues its work at once
  // (on a device: behind a wait on that mark) instead of after stage 0's host saw its work end.
  // "host": the same hand-off, but the next stage's host waits for the mark and only then queues
  // its work (its device never holds queued work blocked on another process's copy: two processes
  // sharing one GPU, where blocked work may cost context switches).
  // "off": the descriptor goes out after the rows are in the slot.
  std::string early_handoff = "on";
  // cuda: "bf16" (default) runs Q8_0 prefill products and prefill attention on bf16 tensor
  // cores with f32 accumulation; "f32" keeps them on f32 SIMT (CudaBackendOptions::bf16_prefill).
  // The cpu backend accepts both and always computes in f32.
  std::string prefill_precision = "bf16";
  // cuda: persistent bf16 copies of the Q8_0 matrices for bf16 prefill products instead of
  // dequantizing per call (CudaBackendOptions::bf16_weight_copy; ~1.9x the Q8_0 bytes).
  // "off" (default); "on": its bytes are taken from the pool budget before the pools are sized;
  // "auto": on only when the pools still get everything they would get without it.
  std::string bf16_weight_copy = "off";
  // cuda: the GEMV of 1..4-token products (decode steps, speculative verify rows): "dp4a" (the
  // int8x3 / float dot GEMV), "mma" (int8 tensor cores: the same cost for 1..4 tokens, so a
  // verify row of 1 + 3 costs little more than a decode step: docs/PERFORMANCE.md) or "auto" (default:
  // worker/decode_gemv.h decode_gemv_is_mma). Every step of one server uses the same GEMV, so speculation keeps plain
  // decoding's bits (CudaBackendOptions::split_gemv_mma).
  std::string decode_gemv = "auto";
  // The KV cache's element types (--kv-cache-type[-k|-v], common/kv_options.h); Assign's
  // kv_cache_type_k / _v, when set, override each side (with_assigned_settings).
  KvTypeFlags kv_cache;
  // After each message the worker polls for the next one without sleeping for this long, so a
  // step that follows closely (the next decode step, the previous stage's output) costs no
  // thread wake-up. -1 = auto: 5000 on cuda (covers the other stages' part of a decode step),
  // 0 on cpu (its compute threads need the cores).
  int busy_poll_us = -1;
};

// The busy-poll window `o` asks for, auto resolved.
int busy_poll_window_us(const WorkerOptions& o);

// Parses argv. Returns false and fills `error` (usage included) on bad flags; `help` is set
// when --help was asked for.
bool parse_worker_options(int argc, char** argv, WorkerOptions* out, std::string* error, bool* help);

// The cpu pool budget when --memory-budget is not given: min(4 GiB, physical_ram / 4). Fixed
// and explicit (not "what is free now") so a restarted worker sizes like its predecessor.
uint64_t default_cpu_pool_budget(uint64_t physical_ram_bytes);

// Physical RAM of this host (0 when unknown).
uint64_t physical_ram_bytes();

// One line for the startup log.
std::string describe(const WorkerOptions& options);

}  // namespace ds
