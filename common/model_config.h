// Model hyperparameters, read once from a GGUF (qwen35-model-spec.md §2, §11) and validated
// against the tensor shapes. Everything the forward pass needs comes from here; nothing is
// hard-coded per model size.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/stage_types.h"  // OutputHead

namespace ds {

class GgufFile;

enum class LayerKind : uint8_t { kLinearAttention, kFullAttention };
const char* layer_kind_name(LayerKind kind);

struct ModelConfig {
  std::string arch;                                  // "qwen35", "qwen35moe" or "qwen3"
  std::string name;                                  // general.name (informational)
  uint32_t n_embd = 0;                               // D, hidden size
  uint32_t n_layer = 0;                              // main-stack depth (block_count - nextn)
  uint32_t n_nextn = 0;                              // MTP blocks after the main stack (blk.n_layer ...)
  uint32_t n_vocab = 0;                              // rows of token_embd
  uint32_t n_ff = 0;                                 // F, FFN intermediate size
  uint32_t n_head = 0;                               // H, attention query heads
  uint32_t n_head_kv = 0;                            // Hkv
  uint32_t head_dim = 0;                             // d (attention.key_length)
  uint32_t n_rot = 0;                                // r, rotary dims (first r of d)
  std::array<int32_t, 4> rope_sections{0, 0, 0, 0};  // M-RoPE (t, h, w, e)
  float rope_theta = 10000.0f;
  float rms_eps = 1e-6f;
  uint32_t context_length = 0;
  uint32_t full_attention_interval = 4;
  std::vector<LayerKind> layer_kinds;  // size n_layer

  // Gated DeltaNet (qwen35 only).
  uint32_t ssm_conv_kernel = 0;  // Kc
  uint32_t ssm_d_state = 0;      // dk
  uint32_t ssm_n_group = 0;      // nk, key heads
  uint32_t ssm_dt_rank = 0;      // nv, value heads
  uint32_t ssm_d_inner = 0;      // nv * dv
  uint32_t ssm_head_v_dim() const { return ssm_dt_rank ? ssm_d_inner / ssm_dt_rank : 0; }
  uint32_t ssm_conv_channels() const { return 2 * ssm_n_group * ssm_d_state + ssm_d_inner; }

  // Mixture of experts (qwen35moe): every FFN is k of E routed SwiGLU experts (softmax router,
  // top-k renormalised) plus a shared SwiGLU expert scaled by a sigmoid gate.
  uint32_t n_expert = 0;       // E (expert_count); 0: dense FFNs
  uint32_t n_expert_used = 0;  // k (expert_used_count)
  uint32_t n_ff_exp = 0;       // a routed expert's FFN size (expert_feed_forward_length)
  uint32_t n_ff_shexp = 0;     // the shared expert's (expert_shared_feed_forward_length)
  bool moe() const { return n_expert > 0; }
  // The Qwen3.5 hybrid stack (Gated DeltaNet + gated attention), dense or MoE.
  bool hybrid() const { return arch == "qwen35" || arch == "qwen35moe"; }

  // Vision input (hybrid models): the id of `<|image_pad|>` in tokenizer.ggml.tokens, the token
  // every image position holds (HF's image_token_id). llama.cpp's converter writes no key for it,
  // so it comes from the vocabulary; -1 when the vocabulary has no such token.
  int32_t image_token_id = -1;

  bool tied_embeddings = false;             // no output.weight: the LM head is token_embd
  bool attn_output_gate = true;             // qwen35: attn_q carries [query | gate] per head
  bool norm_weights_plus_one_baked = true;  // informational: +1 folded by the converter

  // Qwen3 embedding / reranker extras (read for qwen3 only).
  // `qwen3.pooling_type` (llama.cpp's numbering): 0 none, 3 last token (an embedding model),
  // 4 rank (a reranker); mean (1) and cls (2) pooling are refused at load.
  uint32_t pooling_type = 0;
  std::vector<std::string> classifier_labels;  // `qwen3.classifier.output_labels`, e.g. ["yes", "no"]
  // Each label's id in tokenizer.ggml.tokens (its literal text, else its byte-level BPE form), -1
  // when the vocabulary lacks it: the LM-head rows a rank head is built from without cls.output.
  std::vector<int32_t> classifier_label_tokens;
  bool has_cls_head = false;  // cls.output.weight: [n_embd -> n_cls_out], rows in label order
  uint32_t n_cls_out = 0;     // its rows (== classifier_labels.size() when labels are given)

  uint32_t n_attention_layers() const;
  // Index of the first MTP block (blk.N.nextn.*), valid when n_nextn > 0.
  uint32_t mtp_block() const { return n_layer; }
  // GDN value head n reads key head n mod nk (GGUF tiled order, spec §3 T7).
  uint32_t gdn_key_head_for_value_head(uint32_t v) const { return v % ssm_n_group; }
  // GQA: query head h reads KV head h / (H/Hkv) (grouped).
  uint32_t kv_head_for_query_head(uint32_t h) const { return h / (n_head / n_head_kv); }

  std::string describe() const;  // multi-line human-readable summary
};

// The head a model is made for: qwen3 pooling last -> kEmbedding, rank -> kRankClassifier;
// anything else kLanguageModel.
OutputHead default_head(const ModelConfig& config);

// Why `config` cannot serve `head` (a sentence naming what the GGUF lacks), or "" when it can:
// kEmbedding and kRankClassifier are qwen3 only; kRankClassifier needs cls.output.weight, or
// labels that are all tokens of the vocabulary (the head is then the LM-head rows of those tokens).
std::string output_head_problem(const ModelConfig& config, OutputHead head);

// Reads and validates the config. Throws ds::ConfigError / ds::FormatError with a message
// naming the offending key or tensor.
ModelConfig load_model_config(const GgufFile& gguf);

}  // namespace ds
