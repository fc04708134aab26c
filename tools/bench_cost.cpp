#include "tools/bench_cost.h"

#include <cmath>
#include <string_view>

#include "common/stage_footprint.h"

namespace ds::bench {
namespace {

// The stacked routed experts of a MoE layer (blk.N.ffn_{gate,up,down}_exps.weight).
bool is_expert_stack(std::string_view name) {
  return name.find("_exps.") != std::string_view::npos;
}

}  // namespace

ModelCost model_cost(const GgufFile& g, const ModelConfig& c, const KvTypeFlags& kv) {
  ModelCost m;
  m.expert_share = c.moe() ? static_cast<double>(c.n_expert_used) / static_cast<double>(c.n_expert) : 0.0;
  for (const GgufTensor& t : g.tensors()) {
    if (tensor_place(t.name, c).role != TensorRole::kLayer) continue;
    const bool experts = is_expert_stack(t.name);
    const double share = experts ? m.expert_share : 1.0;
    (experts ? m.expert_bytes : m.decode_weight_bytes) += static_cast<double>(t.nbytes);
    if ((t.n_dims == 2 || experts) && t.type != GgmlType::F32)
      m.matrix_params += share * static_cast<double>(t.n_elements());
  }
  const GgufTensor& head = g.tensor(c.tied_embeddings ? "token_embd.weight" : "output.weight");
  const GgufTensor& embd = g.tensor("token_embd.weight");
  m.head_params = static_cast<double>(head.n_elements());
  m.decode_weight_bytes += static_cast<double>(head.nbytes + embd.row_bytes() + g.tensor("output_norm.weight").nbytes);
  const CacheShapes s = stage_cache_shapes(c, StageRange{0, c.n_layer});
  CacheShapes main_stack = s;
  if (c.n_nextn > 0) --main_stack.n_attention_layers;
  m.kv_bytes_per_pos = static_cast<double>(kv_bytes_per_token(main_stack, kv.k_type(), kv.v_type()));
  m.state_bytes = 4.0 * static_cast<double>(s.n_gdn_layers) * static_cast<double>(s.conv_floats + s.ssm_floats);
  return m;
}

double prefill_flops(const ModelCost& m, const ModelConfig& c, size_t n) {
  const double pairs = 0.5 * static_cast<double>(n) * static_cast<double>(n + 1);
  return 2.0 * (m.matrix_params * static_cast<double>(n) + m.head_params) +
         4.0 * c.n_head * c.head_dim * c.n_attention_layers() * pairs;
}

double decode_bytes(const ModelCost& m, size_t ctx) {
  return m.decode_weight_bytes + m.expert_share * m.expert_bytes + 2.0 * m.state_bytes +
         m.kv_bytes_per_pos * static_cast<double>(ctx);
}

double batch_decode_bytes(const ModelCost& m, size_t n_seqs, size_t ctx) {
  const double per_seq = 2.0 * m.state_bytes + m.kv_bytes_per_pos * static_cast<double>(ctx);
  const double experts_read = 1.0 - std::pow(1.0 - m.expert_share, static_cast<double>(n_seqs));
  return m.decode_weight_bytes + experts_read * m.expert_bytes + static_cast<double>(n_seqs) * per_seq;
}

}  // namespace ds::bench
