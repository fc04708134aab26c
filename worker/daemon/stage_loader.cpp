// The production StageLoader: mmaps the GGUF and loads only this worker's layer slice.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/gguf.h"          // GgufFile::open, tensors
#include "common/byte_size.h"     // format_bytes
#include "common/model_config.h"  // load_model_config
#include "worker/cache/pool_sizing.h"
#include "worker/daemon/worker_daemon.h"
#if DS_HAVE_CUDA_BACKEND
#include "kernels/cuda/device_info.h"
#include "worker/cuda_backend.h"
#endif

namespace ds {
namespace {

// Bytes of the tensors this stage reads: its blocks, plus the embedding (first stage) or the
// final norm, LM head and MTP blocks (last stage).
uint64_t stage_weight_bytes(const GgufFile& gguf, const ModelConfig& cfg, uint32_t first, uint32_t last) {
  uint64_t total = 0;
  for (const GgufTensor& t : gguf.tensors()) {
    uint32_t layer = 0;
    if (std::sscanf(t.name.c_str(), "blk.%u.", &layer) == 1) {
      const bool mine = (layer >= first && layer < last) || (last == cfg.n_layer && layer >= cfg.n_layer);
      if (mine) total += t.nbytes;
    } else if (t.name.rfind("token_embd", 0) == 0) {
      if (first == 0 || (last == cfg.n_layer && cfg.tied_embeddings)) total += t.nbytes;
    } else if (last == cfg.n_layer) {
      total += t.nbytes;  // output_norm, output
    }
  }
  return total;
}

// Device memory the pools may take on a CUDA worker: the share of the GPU the operator allows
// (never more than is free now), less the slice's weights and the workspace reserve. Weights,
// pools and workspace are all allocated at load, so nothing later competes for this memory.
uint64_t gpu_pool_budget(const WorkerOptions& o, uint64_t weights) {
#if DS_HAVE_CUDA_BACKEND
  size_t free_bytes = 0, total = 0;
  if (!cuda::device_memory(o.device < 0 ? 0 : o.device, &free_bytes, &total)) {
    throw std::runtime_error("CUDA device " + std::to_string(o.device) + " is not usable (" +
                             std::to_string(cuda::device_count()) + " visible; --devices maps workers to GPUs)");
  }
  const auto share = static_cast<uint64_t>(o.gpu_memory_fraction * static_cast<double>(total));
  const uint64_t usable = std::min<uint64_t>(share, free_bytes);
  const uint64_t taken = weights + o.gpu_workspace_reserve_bytes;
  if (taken >= usable) {
    throw std::runtime_error("the slice needs " + format_bytes(weights) + " of weights + " +
                             format_bytes(o.gpu_workspace_reserve_bytes) + " of workspace reserve, but the budget is " +
                             format_bytes(usable) + " (--gpu-memory-fraction " + std::to_string(o.gpu_memory_fraction) +
                             " of " + format_bytes(total) + ", " + format_bytes(free_bytes) +
                             " free), leaving nothing for the KV/state pools: add workers or raise the fraction");
  }
  return usable - taken;
#else
  (void)o;
  throw std::runtime_error("this build has no CUDA backend (the slice has " + format_bytes(weights) + " of weights)");
#endif
}

// The bytes this worker's pools may take: its backend's budget, capped by --memory-budget and
// by Assign.memory_budget_bytes (weights + state) when those are set.
uint64_t pool_budget(const ipc::v1::Assign& a, const WorkerOptions& o, uint64_t weights) {
  uint64_t budget = 0;
  if (o.backend == "cuda") {
    budget = gpu_pool_budget(o, weights);
    if (o.memory_budget_bytes != 0) budget = std::min(budget, o.memory_budget_bytes);
  } else {
    budget = o.memory_budget_bytes != 0 ? o.memory_budget_bytes : default_cpu_pool_budget(physical_ram_bytes());
  }
  if (a.memory_budget_bytes() != 0) {
    budget = std::min(budget, a.memory_budget_bytes() > weights ? a.memory_budget_bytes() - weights : 0);
  }
  return budget;
}

// Assign's pool numbers as a sizing request.
PoolRequest pool_request(const ipc::v1::Assign& a, const ModelConfig& cfg) {
  if (a.cache_sizing() != ipc::v1::CACHE_SIZING_EXACT && a.cache_sizing() != ipc::v1::CACHE_SIZING_FIT_BUDGET) {
    throw std::runtime_error("unknown cache_sizing " + std::to_string(static_cast<int>(a.cache_sizing())) + " in Assign");
  }
  PoolRequest r;
  if (a.block_size() != 0) r.limit.block_size = a.block_size();
  r.limit.num_blocks = a.num_blocks();
  r.limit.max_seqs = a.max_seqs();
  r.limit.num_snapshots = a.num_snapshots();
  r.exact = a.cache_sizing() == ipc::v1::CACHE_SIZING_EXACT;
  const uint64_t context = a.max_context() != 0 ? a.max_context() : cfg.context_length;
  r.min_blocks = static_cast<uint32_t>(
      std::min<uint64_t>((context + r.limit.block_size - 1) / r.limit.block_size, UINT32_MAX));
  return r;
}

}  // namespace

bool backend_available(const std::string& backend) {
  if (backend == "cpu") return DS_HAVE_MODEL != 0;
#if DS_HAVE_CUDA_BACKEND
  if (backend == "cuda") return cuda::device_count() > 0;
#endif
  return false;
}

LoadedStage load_gguf_stage(const ipc::v1::Assign& assign, const WorkerOptions& worker, int n_threads) {
#if DS_HAVE_MODEL
  auto gguf = std::make_shared<const GgufFile>(GgufFile::open(assign.model_path()));
  const ModelConfig config = load_model_config(*gguf);
  if (assign.first_layer() >= assign.last_layer() || assign.last_layer() > config.n_layer) {
    throw std::runtime_error("layer range [" + std::to_string(assign.first_layer()) + ", " +
                             std::to_string(assign.last_layer()) + ") is not inside the model's " +
                             std::to_string(config.n_layer) + " layers");
  }
  if (assign.is_first() != (assign.first_layer() == 0) || assign.is_last() != (assign.last_layer() == config.n_layer)) {
    throw std::runtime_error("is_first / is_last do not match the layer range");
  }
  LoadedStage out;
  out.shape.n_embd = config.n_embd;
  out.shape.n_vocab = config.n_vocab;
  out.weight_bytes = stage_weight_bytes(*gguf, config, assign.first_layer(), assign.last_layer());
  StageOptions options;
  options.n_threads = n_threads;
  options.max_context = assign.max_context();
  const StageRange range{assign.first_layer(), assign.last_layer()};
  const PoolRequest request = pool_request(assign, config);
  // Pools are sized here, once per worker start: from the budget (FIT_BUDGET, reported in
  // Ready) or exactly as negotiated (EXACT); num_blocks == 0 leaves them to grow on demand.
  if (request.limit.managed() || !request.exact) {
    out.pool_budget_bytes = pool_budget(assign, worker, out.weight_bytes);
    const PoolCosts costs = stage_pool_costs(config, range.first_layer, range.last_layer, request.limit.block_size);
    out.pools = size_pools(costs, request, out.pool_budget_bytes);
    options.cache = out.pools.geometry;
  } else {
    options.cache.block_size = request.limit.block_size;
    if (worker.backend == "cuda") gpu_pool_budget(worker, out.weight_bytes);  // the weights alone must fit
  }
  if (worker.backend == "cuda") {
#if DS_HAVE_CUDA_BACKEND
    const CudaBackendOptions cuda_options{.bf16_prefill = worker.prefill_precision == "bf16"};  // else "f32"
    const int device = worker.device < 0 ? 0 : worker.device;
    out.model = load_stage(gguf, config, range, options, make_cuda_backend(device, cuda_options));
    return out;
#else
    throw std::runtime_error("this build has no CUDA backend");
#endif
  }
  out.model = load_cpu_stage(gguf, config, range, options);
  return out;
#else
  (void)assign, (void)worker, (void)n_threads;
  throw std::runtime_error("this build has no model library (ds_model)");
#endif
}

}  // namespace ds
