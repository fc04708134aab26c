// The production StageLoader: mmaps the GGUF and loads only this worker's layer slice.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/gguf.h"          // GgufFile::open, tensors
#include "common/model_config.h"  // load_model_config
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

// Bytes of the KV pools and GDN state slots + snapshots this stage allocates at start-up.
uint64_t stage_cache_bytes(const ModelConfig& cfg, const CacheGeometry& geo, uint32_t first, uint32_t last) {
  uint64_t attn = 0, gdn = 0;
  for (uint32_t l = first; l < last; ++l) (cfg.layer_kinds[l] == LayerKind::kFullAttention ? attn : gdn) += 1;
  if (last == cfg.n_layer) attn += cfg.n_nextn;  // the MTP block has its own KV pool
  const uint64_t kv_row = 2ull * cfg.n_head_kv * cfg.head_dim * sizeof(float);
  const uint64_t state = (uint64_t{cfg.ssm_conv_kernel} - 1) * cfg.ssm_conv_channels() +
                         uint64_t{cfg.ssm_dt_rank} * cfg.ssm_d_state * cfg.ssm_head_v_dim();
  return attn * geo.num_blocks * geo.block_size * kv_row +
         gdn * (uint64_t{geo.max_seqs} + geo.num_snapshots) * state * sizeof(float);
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

// A CUDA slice must fit the share of the GPU the operator allows: weights + pools, which are
// all allocated once at start-up (nothing is allocated per step beyond small scratch).
void check_gpu_budget(const WorkerOptions& o, uint64_t weights, uint64_t caches) {
#if DS_HAVE_CUDA_BACKEND
  size_t free_bytes = 0, total = 0;
  if (!cuda::device_memory(o.device < 0 ? 0 : o.device, &free_bytes, &total)) {
    throw std::runtime_error("CUDA device " + std::to_string(o.device) + " is not usable (" +
                             std::to_string(cuda::device_count()) + " visible; --devices maps workers to GPUs)");
  }
  const auto budget = static_cast<uint64_t>(o.gpu_memory_fraction * static_cast<double>(total));
  if (weights + caches > budget || weights + caches > free_bytes) {
    throw std::runtime_error("the slice needs " + gib(weights) + " of weights + " + gib(caches) +
                             " of KV/state pools, but the budget is " + gib(budget) + " (--gpu-memory-fraction " +
                             std::to_string(o.gpu_memory_fraction) + " of " + gib(total) + ", " + gib(free_bytes) +
                             " free): lower --kv-blocks, --max-seqs or --prefix-cache-snapshots, or add workers");
  }
#else
  (void)o;
  throw std::runtime_error("this build has no CUDA backend (needs " + gib(weights + caches) + ")");
#endif
}

}  // namespace

bool backend_available(const std::string& backend) {
  if (backend == "cpu") return DS_HAVE_MODEL != 0;
#if DS_HAVE_CUDA_BACKEND
  if (backend == "cuda") return cuda::device_count() > 0;
#endif
  return false;
}

std::unique_ptr<StageModel> load_gguf_stage(const ipc::v1::Assign& assign, const WorkerOptions& worker,
                                            int n_threads, StageShape* shape, uint64_t* weight_bytes) {
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
  shape->n_embd = config.n_embd;
  shape->n_vocab = config.n_vocab;
  *weight_bytes = stage_weight_bytes(*gguf, config, assign.first_layer(), assign.last_layer());
  StageOptions options;
  options.n_threads = n_threads;
  options.max_context = assign.max_context();
  // Pools are sized here, once per worker start, from what the coordinator's scheduler plans with.
  if (assign.block_size() != 0) options.cache.block_size = assign.block_size();
  options.cache.num_blocks = assign.num_blocks();
  options.cache.max_seqs = assign.max_seqs();
  options.cache.num_snapshots = assign.num_snapshots();
  const StageRange range{assign.first_layer(), assign.last_layer()};
  if (worker.backend == "cuda") {
    check_gpu_budget(worker, *weight_bytes, stage_cache_bytes(config, options.cache, range.first_layer, range.last_layer));
#if DS_HAVE_CUDA_BACKEND
    return load_stage(gguf, config, range, options, make_cuda_backend(worker.device < 0 ? 0 : worker.device));
#else
    throw std::runtime_error("this build has no CUDA backend");
#endif
  }
  return load_cpu_stage(gguf, config, range, options);
#else
  (void)assign, (void)worker, (void)n_threads, (void)shape, (void)weight_bytes;
  throw std::runtime_error("this build has no model library (ds_model)");
#endif
}

}  // namespace ds
