// The production StageLoader: mmaps the GGUF and loads only this worker's layer slice.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/byte_size.h"     // format_bytes
#include "common/gguf.h"          // GgufFile::open, tensors
#include "common/ipc/protocol.h"  // assign_kv_type
#include "common/kv_options.h"
#include "common/log.h"
#include "common/model_config.h"           // load_model_config
#include "common/stage_footprint.h"        // stage_reads, stage_weight_bytes, stage_cache_shapes
#include "common/vision_config.h"          // read_vision_config
#include "worker/blocks/image_embedder.h"  // ImageCacheLimits
#include "worker/cache/pool_sizing.h"
#include "worker/cache/state_pool.h"  // StatePool::kMaxCaptures
#include "worker/cache/tower_sizing.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/decode_gemv.h"
#if DS_HAVE_CUDA_BACKEND
#include "kernels/cuda/device_info.h"
#include "worker/cuda_backend.h"
#endif

namespace ds {
namespace {

// Device bytes of the CUDA backend's persistent bf16 copies (CudaBackendOptions::bf16_weight_copy):
// 2 per weight of every Q8_0 matrix the stage multiplies. An upper bound: a matrix only gets its
// copy once a >= 16-token product uses it (the LM head rarely does).
uint64_t stage_bf16_copy_bytes(const GgufFile& gguf, const ModelConfig& cfg, uint32_t first, uint32_t last) {
  uint64_t total = 0;
  for (const GgufTensor& t : gguf.tensors()) {
    if (t.type == GgmlType::Q8_0 && t.n_rows() > 1 && stage_reads(t, cfg, StageRange{first, last}, true)) {
      total += 2 * t.n_elements();
    }
  }
  return total;
}

// Memory set aside from the pools' budget besides the slice's weights: the CUDA backend's bf16
// weight copies (0 when off) and stage 0's vision tower (tower_sizing.h; 0 without --mmproj).
struct SetAside {
  uint64_t copy = 0;
  uint64_t tower = 0;
};

// Device memory the pools may take on a CUDA worker: the share of the GPU the operator allows
// (never more than is free now), less the slice's weights, what is set aside and the workspace
// reserve. Weights, pools and workspace are all allocated at load, so nothing later competes for
// this memory (the tower's workspace is allocated per image, within what was set aside for it).
uint64_t gpu_pool_budget(const WorkerOptions& o, uint64_t weights, SetAside aside = {}) {
#if DS_HAVE_CUDA_BACKEND
  size_t free_bytes = 0, total = 0;
  if (!cuda::device_memory(o.device < 0 ? 0 : o.device, &free_bytes, &total)) {
    throw std::runtime_error("CUDA device " + std::to_string(o.device) + " is not usable (" +
                             std::to_string(cuda::device_count()) + " visible; --devices maps workers to GPUs)");
  }
  const auto share = static_cast<uint64_t>(o.gpu_memory_fraction * static_cast<double>(total));
  const uint64_t usable = std::min<uint64_t>(share, free_bytes);
  const uint64_t taken = weights + aside.copy + aside.tower + o.gpu_workspace_reserve_bytes;
  if (taken >= usable) {
    const std::string copy_text = aside.copy == 0 ? ""
                                                  : " + " + format_bytes(aside.copy) +
                                                        " of bf16 weight copies (--bf16-weight-copy off frees them)";
    const std::string tower_text =
        aside.tower == 0 ? "" : " + " + format_bytes(aside.tower) + " for the vision tower (--mmproj)";
    throw std::runtime_error("the slice needs " + format_bytes(weights) + " of weights" + copy_text + tower_text +
                             " + " + format_bytes(o.gpu_workspace_reserve_bytes) +
                             " of workspace reserve, but the budget is " + format_bytes(usable) +
                             " (--gpu-memory-fraction " + std::to_string(o.gpu_memory_fraction) + " of " +
                             format_bytes(total) + ", " + format_bytes(free_bytes) +
                             " free), leaving nothing for the KV/state pools: add workers or raise the fraction");
  }
  return usable - taken;
#else
  (void)o, (void)aside;
  throw std::runtime_error("this build has no CUDA backend (the slice has " + format_bytes(weights) + " of weights)");
#endif
}

// The bytes this worker's pools may take: its backend's budget, capped by --memory-budget and
// by Assign.memory_budget_bytes (weights + state) when those are set. What is set aside counts
// as weights. On cpu the vision tower comes out of --memory-budget (the pools and the tower share
// the worker's RAM; the model's weights are the file's mapping); on cuda out of the GPU share.
uint64_t pool_budget(const ipc::v1::Assign& a, const WorkerOptions& o, uint64_t weights, SetAside aside = {}) {
  uint64_t budget = 0;
  if (o.backend == "cuda") {
    budget = gpu_pool_budget(o, weights, aside);
    if (o.memory_budget_bytes != 0) budget = std::min(budget, o.memory_budget_bytes);
  } else {
    budget = o.memory_budget_bytes != 0 ? o.memory_budget_bytes : default_cpu_pool_budget(physical_ram_bytes());
    if (aside.tower >= budget) {
      throw std::runtime_error("the vision tower (--mmproj) needs " + format_bytes(aside.tower) +
                               " beside the pools, but the memory budget is " + format_bytes(budget) +
                               " (--memory-budget; --image-max-tokens bounds the tower's workspace)");
    }
    budget -= aside.tower;
  }
  weights += aside.copy + aside.tower;
  if (a.memory_budget_bytes() != 0) {
    budget = std::min(budget, a.memory_budget_bytes() > weights ? a.memory_budget_bytes() - weights : 0);
  }
  return budget;
}

// Assign's pool numbers as a sizing request, KV blocks of the worker's KV types (Assign's, when
// it sent them: with_assigned_settings).
PoolRequest pool_request(const ipc::v1::Assign& a, const ModelConfig& cfg, const WorkerOptions& w) {
  if (a.cache_sizing() != ipc::v1::CACHE_SIZING_EXACT && a.cache_sizing() != ipc::v1::CACHE_SIZING_FIT_BUDGET) {
    throw std::runtime_error("unknown cache_sizing " + std::to_string(static_cast<int>(a.cache_sizing())) +
                             " in Assign");
  }
  PoolRequest r;
  if (a.block_size() != 0) r.limit.block_size = a.block_size();
  r.limit.k_type = w.kv_cache.k_type();
  r.limit.v_type = w.kv_cache.v_type();
  r.limit.num_blocks = a.num_blocks();
  r.limit.max_seqs = a.max_seqs();
  r.limit.num_snapshots = a.num_snapshots();
  // Speculation's GDN rollback records are sized and allocated with the pools (state_pool.h).
  if (a.spec_k() > StatePool::kMaxCaptures) {
    throw std::runtime_error("spec_k " + std::to_string(a.spec_k()) + " in Assign exceeds the " +
                             std::to_string(StatePool::kMaxCaptures) + " drafts a GDN slot can roll back");
  }
  r.limit.captures_per_slot = a.spec_k() > 0 ? static_cast<uint32_t>(StatePool::kMaxCaptures) : 0;
  r.exact = a.cache_sizing() == ipc::v1::CACHE_SIZING_EXACT;
  const uint64_t context = a.max_context() != 0 ? a.max_context() : cfg.context_length;
  r.min_blocks =
      static_cast<uint32_t>(std::min<uint64_t>((context + r.limit.block_size - 1) / r.limit.block_size, UINT32_MAX));
  return r;
}

// --bf16-weight-copy on / auto / off, resolved against the pools' budget: "on" sets the copy's
// bytes aside before the pools are sized (failing with the numbers when they do not fit);
// "auto" keeps it only when the pools come out the same without those bytes; off / f32 prefill
// / a non-cuda backend: no copy. Self-managed pools (grow on demand) leave nothing to compare
// against, so "auto" is off there and "on" only needs the weights and the copy to fit.
struct CopyPlan {
  bool keep = false;
  uint64_t bytes = 0;  // set aside (0 unless keep)
};

CopyPlan plan_bf16_copy(const WorkerOptions& o, uint64_t copy_bytes, const std::function<uint64_t(uint64_t)>& budget,
                        const std::function<bool(uint64_t, uint64_t)>& pools_unchanged) {
  if (o.backend != "cuda" || o.prefill_precision != "bf16" || o.bf16_weight_copy == "off" || copy_bytes == 0) return {};
  if (o.bf16_weight_copy == "on") return {true, copy_bytes};
  try {
    const uint64_t with = budget(copy_bytes);
    return pools_unchanged(budget(0), with) ? CopyPlan{true, copy_bytes} : CopyPlan{};
  } catch (const std::exception&) {
    return {};  // the copy does not fit beside the weights and the workspace reserve
  }
}

// Assign's KV cache types over the worker's own (--kv-cache-type[-k|-v]); an unknown name throws.
void take_kv_types(const ipc::v1::Assign& a, WorkerOptions* w) {
  const auto take = [](const char* field, const std::string& given, KvType own, std::optional<KvType>* side) {
    const std::optional<KvType> t = ipc::assign_kv_type(field, given);
    if (!t) return;
    if (*t != own) {
      log::info("worker", log::Msg() << field << " " << kv_type_name(*t)
                                     << " (the coordinator's; this worker's flag said " << kv_type_name(own) << ")");
    }
    *side = t;
  };
  take("kv_cache_type_k", a.kv_cache_type_k(), w->kv_cache.k_type(), &w->kv_cache.k);
  take("kv_cache_type_v", a.kv_cache_type_v(), w->kv_cache.v_type(), &w->kv_cache.v);
}

// The stage's KV types checked against the model's heads (a clear error naming the flag before
// any memory is sized), and their cost per token in the log.
void check_kv_types(const WorkerOptions& w, const ModelConfig& cfg, StageRange range) {
  const KvType k = w.kv_cache.k_type(), v = w.kv_cache.v_type();
  if (const std::string problem = kv_types_problem(k, v, cfg); !problem.empty()) throw std::runtime_error(problem);
  const CacheShapes shapes = stage_cache_shapes(cfg, range);
  log::info("worker", log::Msg() << "layers [" << range.first_layer << ", " << range.last_layer << "): KV cache "
                                 << kv_types_name(k, v) << ", " << kv_bytes_per_token(shapes, k, v)
                                 << " bytes per token over " << shapes.n_attention_layers << " attention layers");
}

// Stage 0's vision tower beside its pools (tower_sizing.h): its weights, the workspace of the
// largest image the coordinator sends and the encodings the embedder keeps (its default limits,
// as the stage builds it). Logged, since it is taken from the pools.
uint64_t tower_bytes(const GgufFile& mmproj, const ipc::v1::Assign& a, const ModelConfig& cfg, const WorkerOptions& w) {
  const ImageCacheLimits cache{};
  const TowerMemoryInputs in{.n_embd = cfg.n_embd,
                             .max_image_tokens = a.image_max_tokens(),
                             .device_copies = w.backend == "cuda",
                             .cache_max_images = cache.max_images,
                             .cache_max_bytes = cache.max_bytes};
  const TowerMemory m = vision_tower_memory(mmproj, read_vision_config(mmproj), in);
  log::info("worker", log::Msg() << "vision tower: " << format_bytes(m.weight_bytes) << " of weights + "
                                 << format_bytes(m.workspace_bytes) << " of workspace for images up to "
                                 << (a.image_max_tokens() ? a.image_max_tokens() : kDefaultImageMaxTokens)
                                 << " tokens + " << format_bytes(m.encoding_bytes)
                                 << " of cached encodings = " << m.total() << " bytes set aside from the pools");
  return m.total();
}

// Speculation drafts with the MTP block on the last stage: a model without one cannot (the
// coordinator refuses --spec-k for it at start; this covers a coordinator that did not).
void check_spec_k(const ipc::v1::Assign& a, const ModelConfig& cfg) {
  if (a.spec_k() == 0 || !a.is_last() || cfg.n_nextn > 0) return;
  throw std::runtime_error("spec_k " + std::to_string(a.spec_k()) + " in Assign (--spec-k), but the model has no MTP " +
                           "block (" + cfg.arch + ".nextn_predict_layers is 0) to draft with");
}

#if DS_HAVE_CUDA_BACKEND
// How long the weights took to reach the device (context start-up, upload, split-rows repack): the
// largest part of a restarted worker's time to serve again.
void log_weights_loaded(const StageRange& range, uint64_t bytes, std::chrono::steady_clock::time_point t0) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("worker", log::Msg() << "layers [" << range.first_layer << ", " << range.last_layer
                                 << "): " << format_bytes(bytes) << " of weights on the device in "
                                 << static_cast<int64_t>(s * 1000) << " ms");
}
#endif

}  // namespace

bool backend_available(const std::string& backend) {
  if (backend == "cpu") return DS_HAVE_MODEL != 0;
#if DS_HAVE_CUDA_BACKEND
  if (backend == "cuda") return cuda::device_count() > 0;
#endif
  return false;
}

WorkerOptions with_assigned_settings(const WorkerOptions& own, const ipc::v1::Assign& assign) {
  WorkerOptions w = own;
  const auto take = [](const std::string& name, const std::string& given, std::initializer_list<const char*> valid,
                       std::string* setting) {
    if (given.empty()) return;
    bool ok = false;
    for (const char* v : valid) ok = ok || given == v;
    if (!ok) throw std::runtime_error("Assign." + name + " = '" + given + "' is not a valid setting");
    if (given != *setting) {
      log::info("worker", log::Msg() << name << " " << given << " (the coordinator's; this worker's flag said "
                                     << *setting << ")");
    }
    *setting = given;
  };
  take("prefill_precision", assign.prefill_precision(), {"bf16", "f32"}, &w.prefill_precision);
  take("decode_gemv", assign.decode_gemv(), {"auto", "dp4a", "mma"}, &w.decode_gemv);
  take("bf16_weight_copy", assign.bf16_weight_copy(), {"off", "on", "auto"}, &w.bf16_weight_copy);
  take_kv_types(assign, &w);
  if (assign.pool_budget_bytes() != 0) w.memory_budget_bytes = assign.pool_budget_bytes();
  log::info("worker",
            log::Msg() << "settings from the coordinator: prefill_precision=" << w.prefill_precision
                       << " decode_gemv=" << w.decode_gemv << " bf16_weight_copy=" << w.bf16_weight_copy
                       << " pool_budget=" << (w.memory_budget_bytes ? format_bytes(w.memory_budget_bytes) : "(default)")
                       << " kv_cache_type_k=" << kv_type_name(w.kv_cache.k_type())
                       << " kv_cache_type_v=" << kv_type_name(w.kv_cache.v_type()));
  return w;
}

LoadedStage load_gguf_stage(const ipc::v1::Assign& assign, const WorkerOptions& own, int n_threads) {
  const WorkerOptions worker = with_assigned_settings(own, assign);
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
  check_spec_k(assign, config);
  OutputHead head = OutputHead::kLanguageModel;
  if (!output_head_from_wire_name(assign.output_head(), &head)) {
    throw std::runtime_error("Assign.output_head = '" + assign.output_head() + "' is not a head this worker knows");
  }
  LoadedStage out;
  out.shape.n_embd = config.n_embd;
  out.shape.n_vocab = config.n_vocab;
  out.shape.head = head;
  out.weight_bytes = stage_weight_bytes(*gguf, config, StageRange{assign.first_layer(), assign.last_layer()}, head);
  StageOptions options;
  options.n_threads = n_threads;
  options.max_context = assign.max_context();
  options.draft_vocab = assign.draft_vocab();
  options.head = head;
  // Vision input: stage 0 builds the tower from the mmproj and sets its memory aside from the
  // pools' budget; the other stages never read it.
  SetAside aside;
  if (!assign.mmproj_path().empty() && assign.is_first()) {
    options.mmproj = std::make_shared<const GgufFile>(GgufFile::open(assign.mmproj_path()));
    aside.tower = tower_bytes(*options.mmproj, assign, config, worker);
  }
  const StageRange range{assign.first_layer(), assign.last_layer()};
  check_kv_types(worker, config, range);
  const PoolRequest request = pool_request(assign, config, worker);
  // Pools are sized here, once per worker start: from the budget (FIT_BUDGET, reported in
  // Ready) or exactly as negotiated (EXACT); num_blocks == 0 leaves them to grow on demand.
  const uint64_t copy_bytes = worker.backend == "cuda" && worker.bf16_weight_copy != "off"
                                  ? stage_bf16_copy_bytes(*gguf, config, range.first_layer, range.last_layer)
                                  : 0;
  CopyPlan copy;
  const auto with_copy = [&aside](uint64_t c) { return SetAside{.copy = c, .tower = aside.tower}; };
  if (request.limit.managed() || !request.exact) {
    const PoolCosts costs = stage_pool_costs(config, range.first_layer, range.last_layer, request.limit);
    copy = plan_bf16_copy(
        worker, copy_bytes, [&](uint64_t c) { return pool_budget(assign, worker, out.weight_bytes, with_copy(c)); },
        [&](uint64_t without, uint64_t with) { return fits_beside_pools(costs, request, without, with); });
    out.pool_budget_bytes = pool_budget(assign, worker, out.weight_bytes, with_copy(copy.bytes));
    out.pools = size_pools(costs, request, out.pool_budget_bytes);
    options.cache = out.pools.geometry;
  } else {
    options.cache.block_size = request.limit.block_size;
    options.cache.k_type = request.limit.k_type;
    options.cache.v_type = request.limit.v_type;
    if (worker.bf16_weight_copy == "on") {
      copy = plan_bf16_copy(worker, copy_bytes, nullptr, nullptr);
    }
    if (worker.backend == "cuda") gpu_pool_budget(worker, out.weight_bytes, with_copy(copy.bytes));  // all must fit
  }
  if (worker.backend == "cuda") {
#if DS_HAVE_CUDA_BACKEND
    if (worker.bf16_weight_copy != "off") {
      log::info("worker", log::Msg() << "bf16 weight copy (" << worker.bf16_weight_copy << "): "
                                     << (copy.keep ? "kept, " + format_bytes(copy.bytes) + " set aside from the pools"
                                                   : std::string("off (") + format_bytes(copy_bytes) +
                                                         " would shrink the pools, or prefill is f32)"));
    }
    const CudaBackendOptions cuda_options{
        .bf16_prefill = worker.prefill_precision == "bf16",  // else "f32"
        .bf16_weight_copy = copy.keep,
        .split_gemv_mma = decode_gemv_is_mma(worker.decode_gemv, assign.spec_k(), config.n_embd)};
    const int device = worker.device < 0 ? 0 : worker.device;
    const auto t0 = std::chrono::steady_clock::now();
    out.model = load_stage(gguf, config, range, options, make_cuda_backend(device, cuda_options));
    log_weights_loaded(range, out.weight_bytes, t0);
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
