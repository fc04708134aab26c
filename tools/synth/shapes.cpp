#include "tools/synth/shapes.h"

#include "common/error.h"

namespace ds::synth {
namespace {

constexpr uint32_t kVocab = 248320;  // padded Qwen3.5 vocabulary

// The real sizes share d = 256, r = 64, nk = 16, dk = dv = 128 and the padded vocabulary.
SynthShape real(const char* name, uint32_t D, uint32_t layers, uint32_t H, uint32_t Hkv, uint32_t F, uint32_t nv,
                bool tied) {
  SynthShape s;
  s.name = name;
  s.n_embd = D;
  s.n_layer = layers;
  s.n_head = H;
  s.n_head_kv = Hkv;
  s.head_dim = 256;
  s.n_rot = 64;  // partial rotary factor 0.25 of d = 256
  s.n_ff = F;
  s.n_vocab = kVocab;
  s.ssm_n_group = 16;
  s.ssm_dt_rank = nv;
  s.ssm_d_state = 128;
  s.tied = tied;
  return s;
}

// Qwen3.5 MoE (decode-kv-moe-anchors.md §C): 256 experts, 8 used, one shared expert of the
// routed experts' size, 2 KV heads. 35B-A3B: GDN 16 key / 32 value heads (slime's config);
// 122B-A10B: 64 value heads, UNVERIFIED (the anchors give its attention heads only).
SynthShape moe(const char* name, uint32_t D, uint32_t layers, uint32_t H, uint32_t F, uint32_t nv) {
  SynthShape s = real(name, D, layers, H, 2, 0, nv, false);
  s.arch = "qwen35moe";
  s.n_expert = 256;
  s.n_expert_used = 8;
  s.n_ff_exp = F;
  s.n_ff_shexp = F;
  return s;
}

// The CPU test fixture's dimensions (hidden 64, two value heads per key head, so the tiled
// GDN head mapping is exercised) with a small vocabulary, so a CPU forward takes milliseconds.
SynthShape tiny() {
  SynthShape s;
  s.name = "tiny";
  s.n_embd = 64;
  s.n_layer = 8;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_rot = 16;
  s.rope_sections = {3, 3, 2, 0};
  s.n_ff = 128;
  s.n_vocab = 2048;
  s.ssm_n_group = 2;
  s.ssm_dt_rank = 4;
  s.ssm_d_state = 32;
  s.context_length = 8192;
  s.tied = true;
  return s;
}

// Qwen3-Embedding / Qwen3-Reranker (their config.json): head_dim 128, tied embeddings, the
// Qwen3 vocabulary; kind "embed" pools the last token, "rerank" has the two-row cls head.
SynthShape qwen3(const std::string& name, bool rerank, uint32_t D, uint32_t layers, uint32_t H, uint32_t F) {
  SynthShape s;
  s.name = name;
  s.arch = "qwen3";
  s.pooling_type = rerank ? 4 : 3;
  s.n_embd = D;
  s.n_layer = layers;
  s.n_head = H;
  s.n_head_kv = 8;
  s.head_dim = 128;
  s.n_rot = 128;
  s.n_ff = F;
  s.n_vocab = 151936;
  s.context_length = 40960;
  s.tied = true;
  s.n_nextn = 0;
  return s;
}

void add_qwen3_block(std::vector<TensorPlan>& out, const SynthShape& s, const std::string& p) {
  const uint64_t D = s.n_embd, d = s.head_dim, F = s.n_ff;
  out.push_back({p + "attn_norm.weight", GgmlType::F32, {D}, Init::kNorm});
  out.push_back({p + "attn_q.weight", GgmlType::Q8_0, {D, s.n_head * d}, Init::kMatrix});
  out.push_back({p + "attn_k.weight", GgmlType::Q8_0, {D, s.n_head_kv * d}, Init::kMatrix});
  out.push_back({p + "attn_v.weight", GgmlType::Q8_0, {D, s.n_head_kv * d}, Init::kMatrix});
  out.push_back({p + "attn_q_norm.weight", GgmlType::F32, {d}, Init::kNorm});
  out.push_back({p + "attn_k_norm.weight", GgmlType::F32, {d}, Init::kNorm});
  out.push_back({p + "attn_output.weight", GgmlType::Q8_0, {s.n_head * d, D}, Init::kMatrix});
  out.push_back({p + "ffn_norm.weight", GgmlType::F32, {D}, Init::kNorm});
  out.push_back({p + "ffn_gate.weight", GgmlType::Q8_0, {D, F}, Init::kMatrix});
  out.push_back({p + "ffn_up.weight", GgmlType::Q8_0, {D, F}, Init::kMatrix});
  out.push_back({p + "ffn_down.weight", GgmlType::Q8_0, {F, D}, Init::kMatrix});
}

std::vector<TensorPlan> plan_qwen3(const SynthShape& s) {
  std::vector<TensorPlan> out;
  out.push_back({"token_embd.weight", GgmlType::Q8_0, {s.n_embd, s.n_vocab}, Init::kMatrix});
  out.push_back({"output_norm.weight", GgmlType::F32, {s.n_embd}, Init::kNorm});
  if (s.pooling_type == 4) out.push_back({"cls.output.weight", GgmlType::Q8_0, {s.n_embd, 2}, Init::kMatrix});
  for (uint32_t i = 0; i < s.n_layer; ++i) add_qwen3_block(out, s, "blk." + std::to_string(i) + ".");
  return out;
}

void add_attention(std::vector<TensorPlan>& out, const SynthShape& s, const std::string& p) {
  const uint64_t D = s.n_embd, d = s.head_dim;
  out.push_back({p + "attn_q.weight", GgmlType::Q8_0, {D, 2 * s.n_head * d}, Init::kMatrix});  // [query | gate]
  out.push_back({p + "attn_k.weight", GgmlType::Q8_0, {D, s.n_head_kv * d}, Init::kMatrix});
  out.push_back({p + "attn_v.weight", GgmlType::Q8_0, {D, s.n_head_kv * d}, Init::kMatrix});
  out.push_back({p + "attn_q_norm.weight", GgmlType::F32, {d}, Init::kNorm});
  out.push_back({p + "attn_k_norm.weight", GgmlType::F32, {d}, Init::kNorm});
  out.push_back({p + "attn_output.weight", GgmlType::Q8_0, {s.n_head * d, D}, Init::kMatrix});
}

void add_gdn(std::vector<TensorPlan>& out, const SynthShape& s, const std::string& p) {
  const uint64_t D = s.n_embd, C = s.conv_channels(), nv = s.ssm_dt_rank, inner = nv * s.ssm_d_state;
  out.push_back({p + "attn_qkv.weight", GgmlType::Q8_0, {D, C}, Init::kMatrix});
  out.push_back({p + "attn_gate.weight", GgmlType::Q8_0, {D, inner}, Init::kMatrix});
  out.push_back({p + "ssm_conv1d.weight", GgmlType::F32, {s.conv_kernel, C}, Init::kConv});
  out.push_back({p + "ssm_dt.bias", GgmlType::F32, {nv}, Init::kDtBias});
  out.push_back({p + "ssm_a", GgmlType::F32, {nv}, Init::kSsmA});
  out.push_back({p + "ssm_alpha.weight", GgmlType::Q8_0, {D, nv}, Init::kMatrix});
  out.push_back({p + "ssm_beta.weight", GgmlType::Q8_0, {D, nv}, Init::kMatrix});
  out.push_back({p + "ssm_norm.weight", GgmlType::F32, {s.ssm_d_state}, Init::kNorm});
  out.push_back({p + "ssm_out.weight", GgmlType::Q8_0, {inner, D}, Init::kMatrix});
}

// Routed experts stacked as llama.cpp's converter writes them, the router and shared gate in F32.
void add_moe_ffn(std::vector<TensorPlan>& out, const SynthShape& s, const std::string& p) {
  const uint64_t D = s.n_embd, E = s.n_expert, Fe = s.n_ff_exp, Fs = s.n_ff_shexp;
  out.push_back({p + "post_attention_norm.weight", GgmlType::F32, {D}, Init::kNorm});
  out.push_back({p + "ffn_gate_inp.weight", GgmlType::F32, {D, E}, Init::kMatrix});
  out.push_back({p + "ffn_gate_exps.weight", GgmlType::Q8_0, {D, Fe, E}, Init::kMatrix});
  out.push_back({p + "ffn_up_exps.weight", GgmlType::Q8_0, {D, Fe, E}, Init::kMatrix});
  out.push_back({p + "ffn_down_exps.weight", GgmlType::Q8_0, {Fe, D, E}, Init::kMatrix});
  out.push_back({p + "ffn_gate_inp_shexp.weight", GgmlType::F32, {D}, Init::kMatrix});
  out.push_back({p + "ffn_gate_shexp.weight", GgmlType::Q8_0, {D, Fs}, Init::kMatrix});
  out.push_back({p + "ffn_up_shexp.weight", GgmlType::Q8_0, {D, Fs}, Init::kMatrix});
  out.push_back({p + "ffn_down_shexp.weight", GgmlType::Q8_0, {Fs, D}, Init::kMatrix});
}

void add_ffn(std::vector<TensorPlan>& out, const SynthShape& s, const std::string& p) {
  if (s.n_expert > 0) return add_moe_ffn(out, s, p);
  const uint64_t D = s.n_embd, F = s.n_ff;
  out.push_back({p + "post_attention_norm.weight", GgmlType::F32, {D}, Init::kNorm});
  out.push_back({p + "ffn_gate.weight", GgmlType::Q8_0, {D, F}, Init::kMatrix});
  out.push_back({p + "ffn_up.weight", GgmlType::Q8_0, {D, F}, Init::kMatrix});
  out.push_back({p + "ffn_down.weight", GgmlType::Q8_0, {F, D}, Init::kMatrix});
}

// SynthShape::echo: the residual stream keeps more of the input token's embedding, and the MTP
// block starts from it.
void lean_to_echo(std::vector<TensorPlan>& plan, float echo) {
  const auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (TensorPlan& t : plan) {
    for (const char* out :
         {"attn_output.weight", "ssm_out.weight", "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight"}) {
      if (ends_with(t.name, out)) t.scale = 1 - echo;
    }
    if (ends_with(t.name, "nextn.eh_proj.weight")) {
      t.scale = 1 - echo;
      t.plus_identity = true;
    }
  }
}

}  // namespace

SynthShape shape_by_name(const std::string& name) {
  if (name == "0.8b") return real("0.8b", 1024, 24, 8, 2, 3584, 16, true);
  if (name == "2b") return real("2b", 2048, 24, 8, 2, 6144, 16, true);
  if (name == "4b") return real("4b", 2560, 32, 16, 4, 9216, 32, true);  // tied: UNVERIFIED in the spec
  if (name == "9b") return real("9b", 4096, 32, 16, 4, 12288, 32, false);
  if (name == "27b") return real("27b", 5120, 64, 24, 4, 17408, 48, false);
  if (name == "35b-a3b") return moe("35b-a3b", 2048, 40, 16, 512, 32);
  if (name == "122b-a10b") return moe("122b-a10b", 3072, 48, 32, 1024, 64);
  if (name == "tiny") return tiny();
  if (name == "tiny-moe") {  // the tiny shape with 8 experts, 2 used
    SynthShape s = tiny();
    s.name = name;
    s.arch = "qwen35moe";
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 32;
    s.n_ff_shexp = 64;
    return s;
  }
  for (const bool rerank : {false, true}) {
    const std::string kind = rerank ? "qwen3-rerank-" : "qwen3-embed-";
    if (name == kind + "0.6b") return qwen3(name, rerank, 1024, 28, 16, 3072);
    if (name == kind + "4b") return qwen3(name, rerank, 2560, 36, 32, 9728);
    if (name == kind + "8b") return qwen3(name, rerank, 4096, 36, 32, 12288);
  }
  throw ConfigError(
      "unknown shape '" + name +
      "' (choose 0.8b, 2b, 4b, 9b, 27b, 35b-a3b, 122b-a10b, tiny, tiny-moe, or qwen3-embed-|qwen3-rerank- "
      "0.6b|4b|8b; a vision tower: mmproj-9b, mmproj-tiny, ...)");
}

std::vector<TensorPlan> plan_tensors(const SynthShape& s) {
  if (s.arch == "qwen3") return plan_qwen3(s);
  const uint64_t D = s.n_embd;
  std::vector<TensorPlan> out;
  out.push_back({"token_embd.weight", GgmlType::Q8_0, {D, s.n_vocab}, Init::kMatrix});
  out.push_back({"output_norm.weight", GgmlType::F32, {D}, Init::kNorm});
  if (!s.tied) out.push_back({"output.weight", GgmlType::Q8_0, {D, s.n_vocab}, Init::kMatrix});
  for (uint32_t i = 0; i < s.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    out.push_back({p + "attn_norm.weight", GgmlType::F32, {D}, Init::kNorm});
    if ((i + 1) % s.attn_interval == 0) {
      add_attention(out, s, p);
    } else {
      add_gdn(out, s, p);
    }
    add_ffn(out, s, p);
  }
  for (uint32_t m = 0; m < s.n_nextn; ++m) {  // MTP: fc + three norms + one attention block
    const std::string p = "blk." + std::to_string(s.n_layer + m) + ".";
    out.push_back({p + "nextn.eh_proj.weight", GgmlType::Q8_0, {2 * D, D}, Init::kMatrix});
    out.push_back({p + "nextn.enorm.weight", GgmlType::F32, {D}, Init::kNorm});
    out.push_back({p + "nextn.hnorm.weight", GgmlType::F32, {D}, Init::kNorm});
    out.push_back({p + "nextn.shared_head_norm.weight", GgmlType::F32, {D}, Init::kNorm});
    out.push_back({p + "attn_norm.weight", GgmlType::F32, {D}, Init::kNorm});
    add_attention(out, s, p);
    add_ffn(out, s, p);
  }
  if (s.echo > 0) lean_to_echo(out, s.echo);
  return out;
}

}  // namespace ds::synth
