// The production StageLoader: mmaps the GGUF and loads only this worker's layer slice.
#include <memory>
#include <stdexcept>
#include <string>

#include "common/gguf.h"          // GgufFile::open, tensors
#include "common/model_config.h"  // load_model_config
#include "worker/daemon/worker_daemon.h"

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

}  // namespace

std::unique_ptr<StageModel> load_gguf_stage(const ipc::v1::Assign& assign, int n_threads, StageShape* shape,
                                            uint64_t* weight_bytes) {
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
  return load_cpu_stage(gguf, config, StageRange{assign.first_layer(), assign.last_layer()}, options);
#else
  (void)assign, (void)n_threads, (void)shape, (void)weight_bytes;
  throw std::runtime_error("this build has no model library (ds_model)");
#endif
}

}  // namespace ds
