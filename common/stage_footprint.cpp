#include "common/stage_footprint.h"

#include <cstdlib>

#include "common/gguf.h"
#include "common/model_config.h"

namespace ds {

TensorPlace tensor_place(const std::string& name, const ModelConfig& cfg) {
  if (name.rfind("blk.", 0) == 0) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(name.c_str() + 4, &end, 10);
    if (end == name.c_str() + 4 || *end != '.') return {};
    const auto layer = static_cast<uint32_t>(n);
    return {n < cfg.n_layer ? TensorRole::kLayer : TensorRole::kMtp, layer};
  }
  if (name.rfind("token_embd.", 0) == 0) return {TensorRole::kEmbedding, 0};
  if (name.rfind("output_norm.", 0) == 0) return {TensorRole::kFinalNorm, 0};
  if (name.rfind("output.", 0) == 0) return {TensorRole::kHead, 0};
  if (name.rfind("cls.", 0) == 0) return {TensorRole::kClassifier, 0};
  return {};
}

bool stage_reads(const GgufTensor& t, const ModelConfig& cfg, StageRange range, bool as_matrix, OutputHead head) {
  const bool first = range.first_layer == 0;
  const bool last = range.last_layer == cfg.n_layer;
  const bool lm_head = head == OutputHead::kLanguageModel;
  const TensorPlace p = tensor_place(t.name, cfg);
  switch (p.role) {
    case TensorRole::kLayer:
      return p.layer >= range.first_layer && p.layer < range.last_layer;
    case TensorRole::kMtp:
      return last;
    case TensorRole::kEmbedding:
      return (first && !as_matrix) || (last && cfg.tied_embeddings && lm_head);
    case TensorRole::kHead:
      return last && lm_head;
    case TensorRole::kFinalNorm:
      return last;
    case TensorRole::kClassifier:
      return last && head == OutputHead::kRankClassifier;
    case TensorRole::kOther:
      return last;  // as before: unknown top-level tensors go with the head
  }
  return false;
}

uint64_t stage_weight_bytes(const GgufFile& gguf, const ModelConfig& cfg, StageRange range, OutputHead head) {
  uint64_t total = 0;
  for (const GgufTensor& t : gguf.tensors()) {
    if (stage_reads(t, cfg, range, false, head)) total += t.nbytes;
  }
  return total;
}

std::vector<uint64_t> layer_weight_bytes(const GgufFile& gguf, uint32_t n_layer) {
  ModelConfig cfg;
  cfg.n_layer = n_layer;
  std::vector<uint64_t> bytes(n_layer, 0);
  for (const GgufTensor& t : gguf.tensors()) {
    const TensorPlace p = tensor_place(t.name, cfg);
    if (p.role == TensorRole::kLayer) bytes[p.layer] += t.nbytes;
  }
  return bytes;
}

CacheShapes stage_cache_shapes(const ModelConfig& cfg, StageRange range) {
  CacheShapes c;
  for (uint32_t l = range.first_layer; l < range.last_layer && l < cfg.layer_kinds.size(); ++l) {
    ++(cfg.layer_kinds[l] == LayerKind::kFullAttention ? c.n_attention_layers : c.n_gdn_layers);
  }
  if (range.last_layer == cfg.n_layer && cfg.n_nextn > 0) ++c.n_attention_layers;  // the MTP block's KV
  c.kv_row_floats = size_t{cfg.n_head_kv} * cfg.head_dim;
  if (cfg.ssm_conv_kernel > 0) {  // a model with Gated DeltaNet layers
    c.conv_floats = size_t{cfg.ssm_conv_kernel - 1} * cfg.ssm_conv_channels();
    c.ssm_floats = size_t{cfg.ssm_dt_rank} * cfg.ssm_d_state * cfg.ssm_head_v_dim();
  }
  return c;
}

uint64_t kv_bytes_per_token(const CacheShapes& s, KvType k, KvType v) {
  return uint64_t{s.n_attention_layers} * (kv_row_bytes(k, s.kv_row_floats) + kv_row_bytes(v, s.kv_row_floats));
}

}  // namespace ds
