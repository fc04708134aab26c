// Hyperparameters of the known Qwen3.5 sizes (qwen35-model-spec.md §1.2) plus a tiny test
// shape, and the tensor list a qwen35 GGUF of such a shape holds (§2.2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/ggml_types.h"

namespace ds::synth {

struct SynthShape {
  std::string name;  // "9b", "tiny", "qwen3-embed-4b", ...
  std::string arch =
      "qwen35";               // "qwen35moe" (n_expert > 0), or "qwen3": the dense stack of Qwen3-Embedding / -Reranker
  uint32_t pooling_type = 0;  // qwen3: 3 = last token (embedding), 4 = rank (cls.output head)
  uint32_t n_embd = 0;        // D
  uint32_t n_layer = 0;       // main stack
  uint32_t n_head = 0;        // H
  uint32_t n_head_kv = 0;     // Hkv
  uint32_t head_dim = 0;      // d
  uint32_t n_rot = 0;         // r
  std::vector<int32_t> rope_sections{11, 11, 10, 0};
  uint32_t n_ff = 0;      // F (dense FFNs)
  uint32_t n_expert = 0;  // qwen35moe: routed experts E, k of them used per token
  uint32_t n_expert_used = 0;
  uint32_t n_ff_exp = 0;     // a routed expert's FFN size
  uint32_t n_ff_shexp = 0;   // the shared expert's
  uint32_t n_vocab = 0;      // V
  uint32_t ssm_n_group = 0;  // nk
  uint32_t ssm_dt_rank = 0;  // nv
  uint32_t ssm_d_state = 0;  // dk = dv
  uint32_t conv_kernel = 4;  // Kc
  uint32_t attn_interval = 4;
  uint32_t context_length = 262144;
  bool tied = false;     // no output.weight
  uint32_t n_nextn = 1;  // MTP blocks
  // qwen35, 0 <= echo < 1: how far every block leans to predicting its input token again, so that
  // MTP drafts get accepted with random weights (spec tests): the blocks' output projections
  // (attn_output, ssm_out, ffn_down, the MTP block's too) are scaled by 1 - echo and, for echo > 0,
  // the MTP's eh_proj passes its normed embedding half through (+ identity). 0: plain random.
  float echo = 0;
  uint32_t conv_channels() const { return 2 * ssm_n_group * ssm_d_state + ssm_dt_rank * ssm_d_state; }
};

// "0.8b", "2b", "4b", "9b", "27b", the MoE "35b-a3b" and "122b-a10b", "tiny", "tiny-moe", or a Qwen3 pooling model's
// shape "qwen3-{embed,rerank}-{0.6b,4b,8b}"; throws ds::ConfigError naming the choices otherwise.
SynthShape shape_by_name(const std::string& name);

// How a tensor's values are drawn (the scales keep activations finite through a deep stack).
enum class Init : uint8_t {
  kMatrix,  // N(0, 1/fan_in) with TensorPlan::fan_in (default ne0), in the tensor's type (Q8_0, F16)
  kNorm,    // RMSNorm gain, about 1
  kConv,    // depthwise conv taps, N(0, 1/Kc)
  kSsmA,    // -exp(A_log): negative, in [-1, -0.1]
  kDtBias,  // small, in [-0.1, 0.1]
  kBias,    // linear and LayerNorm biases: N(0, 0.02^2)
  kTable,   // a learned embedding table (the vision position grid): N(0, 0.1^2)
};

struct TensorPlan {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> ne;
  Init init;
  uint64_t fan_in = 0;         // kMatrix: the inputs one output sums over; 0 = ne[0] (a matrix's row)
  float scale = 1;             // multiplies the drawn values (SynthShape::echo)
  bool plus_identity = false;  // adds 1 at (row r, column r) for r < min(ne[0], rows) (SynthShape::echo)
};

// Every tensor of the shape in file order: embeddings, blocks, MTP block(s) (qwen35), or
// embeddings, dense blocks and the rank head (qwen3).
std::vector<TensorPlan> plan_tensors(const SynthShape& s);

}  // namespace ds::synth
