#include "coordinator/app/model_host.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "common/byte_size.h"  // format_bytes
#include "common/kv_options.h"
#include "common/log.h"
#include "common/stage_footprint.h"  // stage_cache_shapes, kv_bytes_per_token
#include "common/vision_config.h"
#include "coordinator/engine/gpu_share.h"

namespace ds {
namespace {

constexpr uint32_t kDefaultMaxContext = 32768;
// --max-batch-tokens auto (ServeOptions::max_batch_tokens).
constexpr uint32_t kChatBatchTokens = 2048;
constexpr uint32_t kPoolingBatchTokens = 16384;

std::string file_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Context per sequence: the flag, else the model's, capped so the default KV budget stays sane.
uint32_t resolve_max_context(const ServeOptions& o, const ModelConfig& cfg) {
  if (o.engine.max_context) return o.engine.max_context;
  const uint32_t model = cfg.context_length ? cfg.context_length : kDefaultMaxContext;
  return model < kDefaultMaxContext ? model : kDefaultMaxContext;
}

SchedulerConfig scheduler_config(const ServeOptions& o, uint32_t max_context, const Tokenizer& tok) {
  SchedulerConfig s;
  s.block_size = o.block_size;
  s.max_batch_tokens = o.max_batch_tokens            ? o.max_batch_tokens
                       : o.http.model_kind == "chat" ? kChatBatchTokens
                                                     : kPoolingBatchTokens;
  s.max_seqs = o.max_seqs;
  s.max_context = max_context;
  const uint32_t blocks_per_seq = (max_context + o.block_size - 1) / o.block_size;
  s.num_blocks = o.kv_blocks ? o.kv_blocks : blocks_per_seq * o.max_seqs;
  s.eos_token_ids = tok.eog_ids();
  s.num_snapshots = o.prefix_cache_snapshots.value_or(2 * o.max_seqs);  // 0: prefix cache off
  s.spec_k = o.spec_k;
  s.decode_groups = o.decode_groups ? o.decode_groups
                                    : auto_decode_groups(o.engine.backend, o.engine.devices, o.engine.n_workers,
                                                         static_cast<uint32_t>(o.engine.threads_per_worker),
                                                         std::thread::hardware_concurrency());
  return s;
}

// The workers' KV cache types (--kv-cache-type[-k|-v]), checked against the model's heads before
// any worker starts; the start-up log gives their bytes per token over all of the model's
// attention layers (the MTP block's included). Returns those bytes.
uint64_t check_kv_cache(const ServeOptions& o, const ModelConfig& cfg) {
  const KvType k = o.kv_cache.k_type(), v = o.kv_cache.v_type();
  if (const std::string problem = kv_types_problem(k, v, cfg); !problem.empty()) {
    throw std::runtime_error(o.engine.model_path + ": " + problem);
  }
  const CacheShapes shapes = stage_cache_shapes(cfg, StageRange{0, cfg.n_layer});
  const uint64_t per_token = kv_bytes_per_token(shapes, k, v);
  log::info("deltaserve", log::Msg() << file_name(o.engine.model_path) << ": KV cache " << kv_types_name(k, v) << ", "
                                     << per_token << " bytes per token (" << shapes.n_attention_layers
                                     << " attention layers)");
  return per_token;
}

// The scheduler plans with the pools every worker holds (the minimum they reported at Ready).
void plan_with_worker_capacity(const std::string& model, const CacheGeometry& workers, uint64_t kv_token_bytes,
                               SchedulerConfig* s) {
  if (workers.max_seqs < s->max_seqs) {
    log::warn("deltaserve", log::Msg() << model << ": the workers' memory budgets hold " << workers.max_seqs
                                       << " of the " << s->max_seqs << " sequences --max-seqs asks for (each with one "
                                       << s->max_context << "-token context)");
  }
  s->num_blocks = workers.num_blocks;
  s->max_seqs = workers.max_seqs;
  s->num_snapshots = workers.num_snapshots;
  const uint64_t tokens = uint64_t{s->num_blocks} * s->block_size;
  log::info("deltaserve",
            log::Msg() << model << ": KV capacity: " << s->num_blocks << " blocks of " << s->block_size << " tokens ("
                       << tokens << " tokens in total, " << format_bytes(tokens * kv_token_bytes) << " of "
                       << kv_types_name(workers.k_type, workers.v_type) << " KV), " << s->max_seqs << " state slots, "
                       << s->num_snapshots << " state snapshots" << (s->num_snapshots ? "" : " (prefix cache off)"));
}

// --mode: what the model serves, from the GGUF unless the flag says; the workers' head follows.
// A pooling model never samples, so it neither speculates nor has a chat template to need.
void apply_mode(const ModelConfig& cfg, ServeOptions* o) {
  const OutputHead head = o->mode == "auto"     ? default_head(cfg)
                          : o->mode == "embed"  ? OutputHead::kEmbedding
                          : o->mode == "rerank" ? OutputHead::kRankClassifier
                                                : OutputHead::kLanguageModel;
  if (const std::string problem = output_head_problem(cfg, head); !problem.empty()) {
    throw std::runtime_error(o->engine.model_path + ": --mode " + o->mode + ": " + problem);
  }
  o->engine.output_head = head;
  o->http.model_kind = head == OutputHead::kEmbedding        ? "embed"
                       : head == OutputHead::kRankClassifier ? "rerank"
                                                             : "chat";
  o->http.embedding_size = cfg.n_embd;
  // fp8, the default, was chosen by generation quality (KL); a pooling model's KV lives for one
  // request only, so it keeps the exact f32 cache unless a --kv-cache-type flag says otherwise.
  if (head != OutputHead::kLanguageModel) o->kv_cache.fallback = KvType::kF32;
  if (head != OutputHead::kLanguageModel && o->spec_k > 0) {
    throw std::runtime_error("--spec-k: a " + o->http.model_kind + " model generates nothing to speculate on");
  }
  log::info("deltaserve", log::Msg() << file_name(o->engine.model_path) << ": serving a " << o->http.model_kind
                                     << " model (" << output_head_name(head) << " head"
                                     << (o->mode == "auto" ? ", from the GGUF" : ", --mode") << ")");
}

// --mmproj: the preprocessing the chat routes need (patch size, spatial merge) from the mmproj's
// keys; the workers check its tensors against the model when stage 0 loads it.
void apply_mmproj(const ModelConfig& cfg, ServeOptions* o) {
  const std::string& path = o->engine.mmproj_path;
  if (path.empty()) return;
  if (o->http.model_kind != "chat")
    throw std::runtime_error("--mmproj: a " + o->http.model_kind + " model takes no images");
  if (cfg.image_token_id < 0) {
    throw std::runtime_error("--mmproj: " + o->engine.model_path + " has no <|image_pad|> token in its vocabulary");
  }
  const VisionConfig v = read_vision_config(GgufFile::open(path));
  if (v.out_hidden != cfg.n_embd) {
    throw std::runtime_error("--mmproj " + path + ": projection_dim " + std::to_string(v.out_hidden) +
                             " differs from the model's hidden size " + std::to_string(cfg.n_embd));
  }
  VisionOptions& vo = o->http.vision;
  vo.enabled = true;
  vo.patch_size = v.patch_size;
  vo.merge = v.merge;
  vo.image_token_id = cfg.image_token_id;
  o->engine.image_max_tokens = vo.image_max_tokens;  // stage 0 sets the tower's workspace for it aside
  log::info("deltaserve", log::Msg() << file_name(path) << ": vision input on (patch " << v.patch_size << ", merge "
                                     << v.merge << ", " << vo.image_min_tokens << ".." << vo.image_max_tokens
                                     << " tokens per image, at most " << vo.max_images_per_request << " per request)");
}

}  // namespace

ModelHost::ModelHost(ServeOptions options)
    : o_(std::move(options)),
      gguf_(GgufFile::open(o_.engine.model_path)),
      cfg_(load_model_config(gguf_)),
      tokenizer_(gguf_),
      chat_template_(ChatTemplate::from_gguf(gguf_)) {
  apply_mode(cfg_, &o_);
  apply_mmproj(cfg_, &o_);
  kv_token_bytes_ = check_kv_cache(o_, cfg_);
  o_.engine.max_context = resolve_max_context(o_, cfg_);
  if (o_.http.served_model_name.empty()) o_.http.served_model_name = file_name(o_.engine.model_path);
  o_.http.model_file_name = file_name(o_.engine.model_path);
}

ModelHost::~ModelHost() {
  stop();
}

void ModelHost::start() {
  const std::string& name = o_.http.served_model_name;
  // The scheduler's numbers are upper bounds for the workers' pools (sent in Assign): each
  // worker allocates what fits its memory budget and reports it at Ready; the scheduler then
  // plans with the minimum over the workers. An explicit --kv-blocks must fit every worker.
  BatchEngineOptions bo;
  bo.scheduler = scheduler_config(o_, o_.engine.max_context, tokenizer_);
  // No recurrent layers (qwen3): prefix hits at any cached block, without snapshots.
  bo.scheduler.stateless = !cfg_.hybrid();
  bo.max_plans_in_flight = o_.pipeline_depth ? o_.pipeline_depth : std::min<uint32_t>(o_.engine.n_workers + 1, 4);
  log::info("deltaserve", log::Msg() << name << ": decode groups: " << bo.scheduler.decode_groups
                                     << (o_.decode_groups ? "" : " (auto)") << ", plans in flight up to "
                                     << std::max(bo.max_plans_in_flight, bo.scheduler.decode_groups));
  o_.engine.cache = worker_cache_geometry(bo.scheduler);
  o_.engine.cache.k_type = o_.kv_cache.k_type();
  o_.engine.cache.v_type = o_.kv_cache.v_type();
  o_.engine.cache_sizing = CacheSizing::kFitBudget;
  o_.engine.spec_k = bo.scheduler.spec_k;  // the workers budget each slot's rollback records
  o_.engine.draft_vocab = o_.draft_vocab;
  o_.engine.require_num_blocks = o_.kv_blocks != 0;
  log::info("deltaserve", log::Msg() << name << ": worker memory: up to " << o_.engine.cache.num_blocks
                                     << " KV blocks of " << o_.engine.cache.block_size << " tokens ("
                                     << kv_types_name(o_.engine.cache.k_type, o_.engine.cache.v_type) << "), "
                                     << o_.engine.cache.max_seqs << " state slots, " << o_.engine.cache.num_snapshots
                                     << " state snapshots, as far as each worker's memory budget allows");
  pipeline_ = std::make_unique<PipelineEngine>(o_.engine);
  pipeline_->start();
  plan_with_worker_capacity(name, pipeline_->cache_geometry(), kv_token_bytes_, &bo.scheduler);
  bo.kv_cache_type = kv_types_name(pipeline_->cache_geometry().k_type, pipeline_->cache_geometry().v_type);
  bo.kv_bytes_per_token = kv_token_bytes_;
  for (const WorkerInfo& w : pipeline_->workers()) {
    log::info("deltaserve", log::Msg() << name << ": rank " << w.rank << " layers [" << w.layers.first_layer << ", "
                                       << w.layers.last_layer << ") pid " << w.pid << " " << w.state);
  }
  engine_ = std::make_unique<BatchEngine>(*pipeline_, bo);
  engine_->start();
}

void ModelHost::stop() {
  if (engine_) engine_->stop();
  if (pipeline_) pipeline_->shutdown();
  engine_.reset();
  pipeline_.reset();
}

ServedModel ModelHost::served() {
  return {&o_.http, engine_.get(), &tokenizer_, &chat_template_};
}

ServeOptions side_model_options(const ServeOptions& main, const SideModelOptions& side, const std::string& mode) {
  ServeOptions o = main;
  o.engine.model_path = side.model_path;
  o.engine.n_workers = side.n_workers;
  o.engine.devices = side.devices;
  o.engine.gpu_memory_fraction = side.gpu_memory_fraction;
  o.engine.layer_split.clear();
  o.engine.external_workers = false;
  o.engine.control_endpoint.clear();  // a private ipc:// directory of its own
  o.engine.max_context = 0;           // its own model's
  // One MPS daemon per GPU at most: the main model's engine owns it, if any.
  o.engine.mps = "off";
  o.mode = mode;  // the KV cache types (kv_cache) stay the main model's
  o.spec_k = 0;
  o.draft_vocab = 0;
  o.kv_blocks = 0;
  o.http.served_model_name = side.served_model_name;
  o.engine.mmproj_path.clear();
  o.http.vision = {};
  o.embed_model = {};
  o.rerank_model = {};
  o.embed_upstream.clear();
  o.rerank_upstream.clear();
  return o;
}

}  // namespace ds
