#include "common/model_config.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"
#include "common/gguf.h"
#include "common/utf8.h"

namespace ds {
namespace {

std::string key(const ModelConfig& c, const char* suffix) {
  return c.arch + "." + suffix;
}

// Some converters write per-layer arrays for head counts / FFN sizes (0 on GDN layers).
// Accept a scalar, or an array whose non-zero entries all agree.
uint32_t scalar_or_layer_array(const GgufFile& g, const std::string& k, uint32_t fallback, bool required) {
  const GgufValue* v = g.find(k);
  if (v == nullptr) {
    if (required) throw ConfigError("GGUF key '" + k + "' is missing");
    return fallback;
  }
  if (!v->is_array()) return g.get_u32(k);
  uint32_t value = 0;
  for (int64_t x : g.get_int_array(k)) {
    if (x < 0) throw ConfigError("GGUF key '" + k + "': negative entry");
    if (x == 0) continue;
    if (value != 0 && static_cast<uint32_t>(x) != value)
      throw ConfigError("GGUF key '" + k + "': per-layer values differ, which deltaserve does not support");
    value = static_cast<uint32_t>(x);
  }
  if (value == 0) throw ConfigError("GGUF key '" + k + "': all entries are zero");
  return value;
}

void expect_shape(const GgufFile& g, const std::string& name, std::initializer_list<uint64_t> dims) {
  const GgufTensor& t = g.tensor(name);
  size_t i = 0;
  bool ok = t.n_dims >= dims.size();
  for (uint64_t d : dims) {
    if (!ok) break;
    ok = t.ne[i++] == d;
  }
  for (; ok && i < t.n_dims; ++i) ok = t.ne[i] == 1;
  if (!ok) {
    std::string want = "[";
    i = 0;
    for (uint64_t d : dims) want += (i++ ? ", " : "") + std::to_string(d);
    throw ConfigError("tensor '" + name + "' has shape " + t.shape_string() + ", the config implies " + want + "]");
  }
}

void read_layer_kinds(const GgufFile& g, ModelConfig& c) {
  c.layer_kinds.assign(c.n_layer, LayerKind::kFullAttention);
  if (!c.hybrid()) return;
  const std::string rk = key(c, "attention.recurrent_layers");
  if (g.has(rk)) {
    std::vector<int64_t> flags = g.get_int_array(rk);
    if (flags.size() < c.n_layer)
      throw ConfigError("GGUF key '" + rk + "' has " + std::to_string(flags.size()) + " entries, need " +
                        std::to_string(c.n_layer));
    for (uint32_t i = 0; i < c.n_layer; ++i)
      c.layer_kinds[i] = flags[i] ? LayerKind::kLinearAttention : LayerKind::kFullAttention;
    return;
  }
  c.full_attention_interval = g.get_u32_or(key(c, "full_attention_interval"), 4);
  if (c.full_attention_interval == 0) throw ConfigError(key(c, "full_attention_interval") + " must be > 0");
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    c.layer_kinds[i] =
        ((i + 1) % c.full_attention_interval == 0) ? LayerKind::kFullAttention : LayerKind::kLinearAttention;
  }
}

void read_hparams(const GgufFile& g, ModelConfig& c) {
  c.name = g.get_string_or("general.name", "");
  c.n_embd = g.get_u32(key(c, "embedding_length"));
  const uint32_t blocks = g.get_u32(key(c, "block_count"));
  c.n_nextn = g.get_u32_or(key(c, "nextn_predict_layers"), 0);
  if (c.n_nextn >= blocks)
    throw ConfigError(key(c, "nextn_predict_layers") + " (" + std::to_string(c.n_nextn) +
                      ") must be smaller than block_count (" + std::to_string(blocks) + ")");
  c.n_layer = blocks - c.n_nextn;
  const bool moe = c.arch == "qwen35moe";
  c.n_ff = scalar_or_layer_array(g, key(c, "feed_forward_length"), 0, !moe);
  if (moe) {
    c.n_expert = g.get_u32(key(c, "expert_count"));
    c.n_expert_used = g.get_u32(key(c, "expert_used_count"));
    c.n_ff_exp = g.get_u32(key(c, "expert_feed_forward_length"));
    c.n_ff_shexp = g.get_u32(key(c, "expert_shared_feed_forward_length"));
  }
  c.n_head = scalar_or_layer_array(g, key(c, "attention.head_count"), 0, true);
  c.n_head_kv = scalar_or_layer_array(g, key(c, "attention.head_count_kv"), c.n_head, false);
  c.head_dim = g.get_u32_or(key(c, "attention.key_length"), c.n_head ? c.n_embd / c.n_head : 0);
  const uint32_t vdim = g.get_u32_or(key(c, "attention.value_length"), c.head_dim);
  if (vdim != c.head_dim)
    throw ConfigError("attention key_length " + std::to_string(c.head_dim) + " != value_length " +
                      std::to_string(vdim) + " is not supported");
  c.n_rot = g.get_u32_or(key(c, "rope.dimension_count"), c.head_dim);
  c.rope_theta = g.get_f32_or(key(c, "rope.freq_base"), c.arch == "qwen3" ? 1e6f : 1e7f);
  c.rms_eps = g.get_f32_or(key(c, "attention.layer_norm_rms_epsilon"), 1e-6f);
  c.context_length = g.get_u32_or(key(c, "context_length"), 0);
  const std::string sk = key(c, "rope.dimension_sections");
  if (g.has(sk)) {
    std::vector<int64_t> s = g.get_int_array(sk);
    for (size_t i = 0; i < 4 && i < s.size(); ++i) c.rope_sections[i] = static_cast<int32_t>(s[i]);
  }
  c.pooling_type = g.get_u32_or(key(c, "pooling_type"), 0);
  if (c.hybrid()) {
    c.ssm_conv_kernel = g.get_u32(key(c, "ssm.conv_kernel"));
    c.ssm_d_state = g.get_u32(key(c, "ssm.state_size"));
    c.ssm_n_group = g.get_u32(key(c, "ssm.group_count"));
    c.ssm_dt_rank = g.get_u32(key(c, "ssm.time_step_rank"));
    c.ssm_d_inner = g.get_u32(key(c, "ssm.inner_size"));
  }
}

// GPT-2 byte-level BPE spelling of `text`: printable bytes stand for themselves, the others
// (space, controls, ...) for U+0100 + their rank among those bytes, as vocabularies store them.
std::string byte_level_spelling(const std::string& text) {
  const auto direct = [](unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
  std::string out;
  for (const unsigned char b : text) {
    uint32_t cp = b;
    if (!direct(b)) {
      cp = 256;
      for (unsigned x = 0; x < b; ++x) cp += direct(x) ? 0 : 1;
    }
    utf8::append(out, cp);
  }
  return out;
}

// A label's token id: its literal text, else its byte-level spelling; -1 when neither is a token.
int32_t label_token(const std::vector<std::string_view>& tokens, const std::string& label) {
  for (const std::string& spelling : {label, byte_level_spelling(label)}) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == spelling) return static_cast<int32_t>(i);
    }
  }
  return -1;
}

// The vocabulary id of Qwen's image placeholder token, -1 when absent. Searched from the end: the
// added (special) tokens come after the BPE vocabulary.
int32_t image_token_id(const GgufFile& g, uint32_t n_vocab) {
  const char* tk = "tokenizer.ggml.tokens";
  if (!g.has(tk)) return -1;
  const std::vector<std::string_view>& tokens = g.get_string_array(tk);
  for (size_t i = std::min<size_t>(tokens.size(), n_vocab); i-- > 0;) {
    if (tokens[i] == "<|image_pad|>") return static_cast<int32_t>(i);
  }
  return -1;
}

// qwen3's pooling, classifier labels and cls head (embedding models, rerankers).
void read_qwen3_heads(const GgufFile& g, ModelConfig& c) {
  if (c.pooling_type != 0 && c.pooling_type != 3 && c.pooling_type != 4) {
    throw ConfigError(key(c, "pooling_type") + " " + std::to_string(c.pooling_type) +
                      " is not supported (0 none, 3 last token: embedding, 4 rank: reranker)");
  }
  const std::string lk = key(c, "classifier.output_labels");
  if (g.has(lk)) {
    for (std::string_view l : g.get_string_array(lk)) c.classifier_labels.emplace_back(l);
    const char* tk = "tokenizer.ggml.tokens";
    const std::vector<std::string_view> none;
    const std::vector<std::string_view>& tokens = g.has(tk) ? g.get_string_array(tk) : none;
    for (const std::string& l : c.classifier_labels) c.classifier_label_tokens.push_back(label_token(tokens, l));
  }
  if (const GgufTensor* cls = g.find_tensor("cls.output.weight")) {
    if (g.find_tensor("cls.output.bias") != nullptr) throw ConfigError("cls.output.bias is not supported");
    if (cls->n_dims != 2 || cls->ne[1] == 0)
      throw ConfigError("cls.output.weight must be 2-D, has shape " + cls->shape_string());
    c.has_cls_head = true;
    c.n_cls_out = static_cast<uint32_t>(cls->ne[1]);
  }
  const std::string sk = key(c, "rope.scaling.type");
  if (g.has(sk) && g.get_string(sk) != "none") {
    throw ConfigError(sk + " '" + g.get_string(sk) + "' is not supported (deltaserve runs plain RoPE for qwen3)");
  }
}

void check_divisibility(const ModelConfig& c) {
  auto fail = [](const std::string& m) { throw ConfigError("inconsistent model config: " + m); };
  if (c.n_embd == 0 || c.n_layer == 0 || c.n_head == 0 || c.n_head_kv == 0 || c.head_dim == 0 ||
      (c.n_ff == 0 && !c.moe()))
    fail("zero-sized dimension");
  if (c.arch == "qwen35moe" && (c.n_expert == 0 || c.n_ff_exp == 0 || c.n_ff_shexp == 0))
    fail("zero-sized expert dimension");
  if (c.moe() && (c.n_expert_used == 0 || c.n_expert_used > c.n_expert))
    fail("expert_used_count " + std::to_string(c.n_expert_used) + " must be in [1, expert_count " +
         std::to_string(c.n_expert) + "]");
  if (c.n_head % c.n_head_kv != 0)
    fail("head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
         std::to_string(c.n_head_kv));
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    fail("rope dimension_count " + std::to_string(c.n_rot) + " must be even and <= head dim");
  if (!c.hybrid()) return;
  if (c.ssm_conv_kernel < 1 || c.ssm_d_state == 0 || c.ssm_n_group == 0 || c.ssm_dt_rank == 0)
    fail("zero-sized GDN dimension");
  if (c.ssm_dt_rank % c.ssm_n_group != 0)
    fail("ssm.time_step_rank (value heads) must be a multiple of ssm.group_count (key heads)");
  if (c.ssm_d_inner % c.ssm_dt_rank != 0) fail("ssm.inner_size must be a multiple of ssm.time_step_rank");
}

void check_attention_tensors(const GgufFile& g, const ModelConfig& c, const std::string& p, bool gated) {
  const uint64_t D = c.n_embd, d = c.head_dim;
  expect_shape(g, p + "attn_norm.weight", {D});
  expect_shape(g, p + "attn_q.weight", {D, (gated ? 2 : 1) * c.n_head * d});
  expect_shape(g, p + "attn_k.weight", {D, c.n_head_kv * d});
  expect_shape(g, p + "attn_v.weight", {D, c.n_head_kv * d});
  expect_shape(g, p + "attn_q_norm.weight", {d});
  expect_shape(g, p + "attn_k_norm.weight", {d});
  expect_shape(g, p + "attn_output.weight", {c.n_head * d, D});
}

void check_ffn_tensors(const GgufFile& g, const ModelConfig& c, const std::string& p, const char* post_norm) {
  const uint64_t D = c.n_embd, F = c.n_ff;
  expect_shape(g, p + post_norm, {D});
  expect_shape(g, p + "ffn_gate.weight", {D, F});
  expect_shape(g, p + "ffn_up.weight", {D, F});
  expect_shape(g, p + "ffn_down.weight", {F, D});
}

// The routed experts are stacked [E][F][D] (gate, up) and [E][D][F] (down): llama.cpp's layout.
void check_moe_tensors(const GgufFile& g, const ModelConfig& c, const std::string& p) {
  const uint64_t D = c.n_embd, E = c.n_expert, Fe = c.n_ff_exp, Fs = c.n_ff_shexp;
  expect_shape(g, p + "post_attention_norm.weight", {D});
  expect_shape(g, p + "ffn_gate_inp.weight", {D, E});
  expect_shape(g, p + "ffn_gate_exps.weight", {D, Fe, E});
  expect_shape(g, p + "ffn_up_exps.weight", {D, Fe, E});
  expect_shape(g, p + "ffn_down_exps.weight", {Fe, D, E});
  expect_shape(g, p + "ffn_gate_inp_shexp.weight", {D});
  expect_shape(g, p + "ffn_gate_shexp.weight", {D, Fs});
  expect_shape(g, p + "ffn_up_shexp.weight", {D, Fs});
  expect_shape(g, p + "ffn_down_shexp.weight", {Fs, D});
}

void check_gdn_tensors(const GgufFile& g, const ModelConfig& c, const std::string& p) {
  const uint64_t D = c.n_embd, C = c.ssm_conv_channels(), nv = c.ssm_dt_rank;
  expect_shape(g, p + "attn_norm.weight", {D});
  expect_shape(g, p + "attn_qkv.weight", {D, C});
  expect_shape(g, p + "attn_gate.weight", {D, c.ssm_d_inner});
  expect_shape(g, p + "ssm_conv1d.weight", {c.ssm_conv_kernel, C});
  expect_shape(g, p + "ssm_dt.bias", {nv});
  expect_shape(g, p + "ssm_a", {nv});
  expect_shape(g, p + "ssm_alpha.weight", {D, nv});
  expect_shape(g, p + "ssm_beta.weight", {D, nv});
  expect_shape(g, p + "ssm_norm.weight", {c.ssm_head_v_dim()});
  expect_shape(g, p + "ssm_out.weight", {c.ssm_d_inner, D});
}

void check_tensors(const GgufFile& g, const ModelConfig& c) {
  expect_shape(g, "token_embd.weight", {c.n_embd, c.n_vocab});
  expect_shape(g, "output_norm.weight", {c.n_embd});
  if (!c.tied_embeddings) expect_shape(g, "output.weight", {c.n_embd, c.n_vocab});
  if (c.has_cls_head) {
    const uint64_t n_out = c.classifier_labels.empty() ? c.n_cls_out : c.classifier_labels.size();
    expect_shape(g, "cls.output.weight", {c.n_embd, n_out});  // one row per label
  }
  const bool qwen35 = c.hybrid();
  const auto check_ffn = [&](const std::string& p) {
    if (c.moe()) return check_moe_tensors(g, c, p);
    check_ffn_tensors(g, c, p, qwen35 ? "post_attention_norm.weight" : "ffn_norm.weight");
  };
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    if (c.layer_kinds[i] == LayerKind::kLinearAttention) {
      check_gdn_tensors(g, c, p);
    } else {
      check_attention_tensors(g, c, p, qwen35);
    }
    check_ffn(p);
  }
  for (uint32_t m = 0; m < c.n_nextn; ++m) {
    const std::string p = "blk." + std::to_string(c.n_layer + m) + ".";
    expect_shape(g, p + "nextn.eh_proj.weight", {2 * uint64_t{c.n_embd}, c.n_embd});
    expect_shape(g, p + "nextn.enorm.weight", {c.n_embd});
    expect_shape(g, p + "nextn.hnorm.weight", {c.n_embd});
    check_attention_tensors(g, c, p, qwen35);
    check_ffn(p);
  }
}

}  // namespace

const char* layer_kind_name(LayerKind kind) {
  return kind == LayerKind::kLinearAttention ? "linear" : "full";
}

uint32_t ModelConfig::n_attention_layers() const {
  uint32_t n = 0;
  for (LayerKind k : layer_kinds) n += k == LayerKind::kFullAttention;
  return n;
}

std::string ModelConfig::describe() const {
  std::ostringstream o;
  o << "arch: " << arch << (name.empty() ? "" : " (" + name + ")") << "\n"
    << "hidden: " << n_embd << ", ffn: " << n_ff << ", vocab: " << n_vocab << "\n"
    << "main layers: " << n_layer << " (" << n_attention_layers() << " full attention), MTP layers: " << n_nextn << "\n"
    << "layer kinds:";
  for (uint32_t i = 0; i < n_layer; ++i) o << (i ? ", " : " ") << layer_kind_name(layer_kinds[i]);
  o << "\nattention: " << n_head << " q heads / " << n_head_kv << " kv heads, head dim " << head_dim << ", rotary dims "
    << n_rot << ", rope theta " << rope_theta << ", sections [" << rope_sections[0] << ", " << rope_sections[1] << ", "
    << rope_sections[2] << ", " << rope_sections[3] << "]\n";
  if (moe()) {
    o << "experts: " << n_expert_used << " of " << n_expert << " routed (ffn " << n_ff_exp
      << ") + a shared expert (ffn " << n_ff_shexp << ")\n";
  }
  if (hybrid()) {
    o << "gated deltanet: " << ssm_n_group << " key heads / " << ssm_dt_rank << " value heads, dk " << ssm_d_state
      << ", dv " << ssm_head_v_dim() << ", conv kernel " << ssm_conv_kernel << " (value head n reads key head n mod "
      << ssm_n_group << ")\n";
  }
  if (arch == "qwen3") {
    o << "output head: " << output_head_name(default_head(*this)) << " (pooling type " << pooling_type << ")";
    if (has_cls_head) o << ", cls.output " << n_cls_out << " rows";
    for (size_t i = 0; i < classifier_labels.size(); ++i) o << (i ? ", " : ", labels: ") << classifier_labels[i];
    o << "\n";
  }
  o << "rms eps: " << rms_eps << ", context: " << context_length << "\n"
    << "embeddings: " << (tied_embeddings ? "tied (LM head = token_embd)" : "untied (output.weight)") << "\n";
  return o.str();
}

OutputHead default_head(const ModelConfig& c) {
  if (c.arch != "qwen3") return OutputHead::kLanguageModel;
  if (c.pooling_type == 3) return OutputHead::kEmbedding;
  if (c.pooling_type == 4) return OutputHead::kRankClassifier;
  return OutputHead::kLanguageModel;
}

std::string output_head_problem(const ModelConfig& c, OutputHead head) {
  if (head == OutputHead::kLanguageModel) return "";
  const std::string what = std::string("the ") + output_head_name(head) + " head";
  if (c.arch != "qwen3") return "architecture '" + c.arch + "' serves only the language-model head, not " + what;
  if (head == OutputHead::kEmbedding || c.has_cls_head) return "";
  if (c.classifier_labels.empty()) {
    return what +
           " needs cls.output.weight or qwen3.classifier.output_labels (with an LM head), and the GGUF "
           "has neither";
  }
  for (size_t i = 0; i < c.classifier_labels.size(); ++i) {
    if (c.classifier_label_tokens[i] < 0) {
      return what + " has no cls.output.weight, and its label '" + c.classifier_labels[i] +
             "' is no token of tokenizer.ggml.tokens to take an LM-head row from";
    }
  }
  return "";
}

ModelConfig load_model_config(const GgufFile& g) {
  ModelConfig c;
  c.arch = g.get_string("general.architecture");
  if (c.arch != "qwen35" && c.arch != "qwen35moe" && c.arch != "qwen3") {
    throw ConfigError("unsupported general.architecture '" + c.arch +
                      "' (deltaserve runs qwen35, qwen35moe and qwen3)");
  }
  read_hparams(g, c);
  read_layer_kinds(g, c);
  check_divisibility(c);
  c.attn_output_gate = c.hybrid();
  c.norm_weights_plus_one_baked = c.hybrid();
  const GgufTensor& embd = g.tensor("token_embd.weight");
  if (embd.n_dims != 2) throw ConfigError("token_embd.weight must be 2-D, has shape " + embd.shape_string());
  c.n_vocab = static_cast<uint32_t>(embd.ne[1]);
  c.tied_embeddings = g.find_tensor("output.weight") == nullptr;
  if (c.arch == "qwen3") read_qwen3_heads(g, c);
  if (c.hybrid()) c.image_token_id = image_token_id(g, c.n_vocab);
  check_tensors(g, c);
  return c;
}

}  // namespace ds
