// Qwen3.5 / Qwen3.6 dense hybrid (GGUF arch `qwen35`): one pipeline stage, written as a
// readable sequence of backend ops. Formulas: qwen35-model-spec.md §4 (gated attention),
// §5 (Gated DeltaNet), §6 (block, FFN, head), §7 (MTP).
//
// A step processes a batch of sequences with different lengths and start positions; token
// rows of all sequences are concatenated so the projections run as one matmul, while conv,
// recurrence and attention run per sequence over that sequence's state. State lives in pools
// (worker/cache): GDN layers use the sequence's state slot, attention layers read and write
// K/V through its block table.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "worker/backend.h"
#include "worker/cache/stage_cache.h"
#include "worker/models/qwen35_spans.h"
#include "worker/models/workspace.h"
#include "worker/stage_model.h"

namespace ds {
namespace {

// ---- weights ---------------------------------------------------------------------------------

struct AttentionWeights {
  WeightView q, k, v, o;  // q: [D -> 2*H*d], per head [query | gate]
  WeightView qkv;         // stacked [q ; k ; v] when the backend stacks (q, k, v are row ranges of it)
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
};

struct GdnWeights {
  WeightView qkv, gate, alpha, beta, out;
  const float* conv = nullptr;      // [C][Kc]
  const float* dt_bias = nullptr;   // [nv]
  const float* a = nullptr;         // [nv], = -exp(A_log)
  const float* ssm_norm = nullptr;  // [dv], shared by all value heads
  // Stacked copies (Backend::weight_stack; data == nullptr when the backend keeps them apart):
  // [qkv ; gate] and [alpha ; beta]; qkv/gate/alpha/beta are then row ranges of these. When all
  // four share a type, in_proj = [qkv ; gate ; alpha ; beta] is one stack (one decode GEMV) and
  // the other two are row ranges of it.
  WeightView qkv_gate, alpha_beta, in_proj;
};

struct LayerWeights {
  LayerKind kind = LayerKind::kLinearAttention;
  const float* attn_norm = nullptr;
  const float* post_norm = nullptr;
  AttentionWeights attn;
  GdnWeights gdn;
  WeightView ffn_gate, ffn_up, ffn_down;
  WeightView ffn_gate_up;  // stacked [gate ; up] when the backend stacks (see GdnWeights)
};

struct MtpWeights {
  const float* enorm = nullptr;
  const float* hnorm = nullptr;
  const float* head_norm = nullptr;
  WeightView eh_proj, embed, head;
  LayerWeights block;
};

using qwen35::all_verify_rows;
using qwen35::gdn_pieces;
using qwen35::GdnPiece;
using qwen35::is_verify_row;
using qwen35::one_row_per_span;
using qwen35::raw_gate_rows;
using qwen35::SeqSpan;

class Qwen35Stage final : public StageModel {
 public:
  Qwen35Stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config, StageRange range,
              const StageOptions& options, std::unique_ptr<Backend> backend)
      : gguf_(std::move(gguf)), cfg_(config), range_(range), opt_(options), be_(std::move(backend)), ws_(*be_) {
    bind_weights();
    cache_ = std::make_unique<StageCache>(*be_, opt_.cache, cache_shapes());
  }

  const StageRange& range() const override { return range_; }
  bool is_first() const override { return range_.first_layer == 0; }
  bool is_last() const override { return range_.last_layer == cfg_.n_layer; }
  const std::vector<std::vector<float>>& layer_hidden() const override { return layer_hidden_; }

  void forward(const StepInput& in, StepOutput* out) override;
  void forward_mtp(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids, const float* hidden,
                   std::vector<float>* logits, std::vector<float>* out_hidden) override;
  bool forward_mtp_last(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids, const float* hidden,
                        const DigestRequest* digest, LogitDigest* last_digest, std::vector<float>* last_logits,
                        std::vector<float>* last_hidden) override;
  void drop_sequence(uint64_t seq_id) override { cache_->drop(seq_id); }
  void drop_all() override { cache_->drop_all(); }

 private:
  void bind_weights();
  LayerWeights bind_layer(uint32_t il, LayerKind kind);
  WeightView w(const std::string& name) const { return be_->weight(gguf_->tensor(name)); }
  WeightView stacked(const std::vector<std::string>& names, const std::vector<WeightView*>& parts) const;
  const float* f(const std::string& name) const { return be_->f32_tensor(gguf_->tensor(name)); }

  CacheShapes cache_shapes();
  void check_batch(const StepInput& in) const;
  std::vector<SeqSpan> prepare_batch(const StepInput& in);
  void set_positions(const std::vector<SeqSpan>& spans, size_t T);
  float* run_mtp_block(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids, const float* hidden);

  void gdn_layer(const LayerWeights& lw, size_t local, const std::vector<SeqSpan>& spans, size_t T);
  struct GdnInputs {
    float* qkv;         // raw conv input [T, C]
    float* z;           // output gate [T, nv*dv]
    GdnRawGates gates;  // row t: token t's alpha / beta_raw (rows of the projections), a, dt_bias
  };
  GdnInputs gdn_projections(const LayerWeights& lw, size_t T);
  void gdn_decode_all(const LayerWeights& lw, size_t gl, const std::vector<SeqSpan>& spans, const GdnInputs& in,
                      float* conv, float* o);
  void gdn_pieces_one_by_one(const LayerWeights& lw, size_t gl, const std::vector<SeqSpan>& spans, size_t T,
                             bool single_tokens, const GdnInputs& in, float* conv, const float* g, const float* beta,
                             float* o);
  void attention_layer(const LayerWeights& lw, const std::vector<SeqSpan>& spans, size_t T, bool mtp,
                       size_t local);
  void attend(const std::vector<SeqSpan>& spans, const float* k_pool, const float* v_pool, const float* qg, float* o);
  void ffn(const LayerWeights& lw, size_t T, const float* next_norm);
  void run_layer(const LayerWeights& lw, size_t local, const std::vector<SeqSpan>& spans, size_t T, bool mtp,
                 bool normed = false, const float* next_norm = nullptr);
  void lm_head(const float* rows, size_t n_rows, const float* norm, const WeightView& head, std::vector<float>* logits,
               std::vector<float>* normed_out, const DigestRequest* digest_rows = nullptr,
               std::vector<LogitDigest>* digests = nullptr);

  std::shared_ptr<const GgufFile> gguf_;
  ModelConfig cfg_;
  StageRange range_;
  StageOptions opt_;
  std::unique_ptr<Backend> be_;
  Workspace ws_;

  WeightView token_embd_, output_;
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  bool has_mtp_ = false;
  MtpWeights mtp_;

  // Per local layer: its KV pool (attention) or its place in a state slot (GDN); the MTP
  // block's attention has the pool after the main layers'.
  std::vector<size_t> cache_index_;
  size_t mtp_pool_ = 0;
  std::unique_ptr<StageCache> cache_;  // after be_: released before the backend goes
  std::vector<int32_t> positions_;  // host [3][T]
  std::vector<uint32_t> kv_rows_;   // host [T]: pool row of every token of the step
  std::vector<uint32_t> slots_;     // host: state slot of every sequence of a decode step
  std::vector<DecodeAttentionSeq> decode_seqs_;  // host: every sequence of a decode step, for attention
  std::vector<std::vector<float>> layer_hidden_;
  bool output_in_flight_ = false;  // the last forward returned before its hidden rows landed
};

// ---- loading ---------------------------------------------------------------------------------------

// Matrices that share an input, stacked row-wise when the backend can (one product for all at
// decode); `parts` get their own views either way (row ranges of the stack, or separate).
// A stack and its first part share a data pointer; the stacks run at T == 1 (GEMV) and, where
// Backend::stacks_multi_token says so, in small multi-token steps (matmul_rows), never in prefill
// (except alpha_beta, whose parts then never run), so a cache keyed by that pointer (CudaBackend's
// bf16 prefill copies, which the small multi-token products never ask for) meets one shape only.
WeightView Qwen35Stage::stacked(const std::vector<std::string>& names, const std::vector<WeightView*>& parts) const {
  std::vector<const GgufTensor*> tensors;
  for (const std::string& n : names) tensors.push_back(&gguf_->tensor(n));
  const WeightView all = be_->weight_stack(tensors.data(), tensors.size());
  size_t first = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    *parts[i] = all.data != nullptr ? row_range(all, first, tensors[i]->n_rows()) : w(names[i]);
    first += tensors[i]->n_rows();
  }
  return all;
}

LayerWeights Qwen35Stage::bind_layer(uint32_t il, LayerKind kind) {
  const std::string p = "blk." + std::to_string(il) + ".";
  LayerWeights lw;
  lw.kind = kind;
  lw.attn_norm = f(p + "attn_norm.weight");
  lw.post_norm = f(p + "post_attention_norm.weight");
  if (kind == LayerKind::kFullAttention) {
    lw.attn.o = w(p + "attn_output.weight");
    lw.attn.q_norm = f(p + "attn_q_norm.weight");
    lw.attn.k_norm = f(p + "attn_k_norm.weight");
    lw.attn.qkv = stacked({p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"},
                          {&lw.attn.q, &lw.attn.k, &lw.attn.v});
  } else {
    lw.gdn = {{}, {}, {}, {}, w(p + "ssm_out.weight"), f(p + "ssm_conv1d.weight"),
              f(p + "ssm_dt.bias"), f(p + "ssm_a"), f(p + "ssm_norm.weight"), {}, {}, {}};
    lw.gdn.in_proj = stacked({p + "attn_qkv.weight", p + "attn_gate.weight", p + "ssm_alpha.weight",
                              p + "ssm_beta.weight"},
                             {&lw.gdn.qkv, &lw.gdn.gate, &lw.gdn.alpha, &lw.gdn.beta});
    if (lw.gdn.in_proj.data != nullptr) {
      const size_t n_qkv_gate = lw.gdn.qkv.rows + lw.gdn.gate.rows;
      lw.gdn.qkv_gate = row_range(lw.gdn.in_proj, 0, n_qkv_gate);
      lw.gdn.alpha_beta = row_range(lw.gdn.in_proj, n_qkv_gate, lw.gdn.alpha.rows + lw.gdn.beta.rows);
    } else {
      lw.gdn.qkv_gate = stacked({p + "attn_qkv.weight", p + "attn_gate.weight"}, {&lw.gdn.qkv, &lw.gdn.gate});
      lw.gdn.alpha_beta = stacked({p + "ssm_alpha.weight", p + "ssm_beta.weight"}, {&lw.gdn.alpha, &lw.gdn.beta});
    }
  }
  lw.ffn_gate_up = stacked({p + "ffn_gate.weight", p + "ffn_up.weight"}, {&lw.ffn_gate, &lw.ffn_up});
  lw.ffn_down = w(p + "ffn_down.weight");
  return lw;
}

void Qwen35Stage::bind_weights() {
  if (range_.first_layer >= range_.last_layer || range_.last_layer > cfg_.n_layer) {
    throw ConfigError("invalid layer range [" + std::to_string(range_.first_layer) + ", " +
                      std::to_string(range_.last_layer) + ") for a model with " + std::to_string(cfg_.n_layer) +
                      " layers");
  }
  if (is_first() || (is_last() && cfg_.tied_embeddings)) token_embd_ = w("token_embd.weight");
  for (uint32_t il = range_.first_layer; il < range_.last_layer; ++il) layers_.push_back(bind_layer(il, cfg_.layer_kinds[il]));
  if (!is_last()) return;
  output_norm_ = f("output_norm.weight");
  output_ = cfg_.tied_embeddings ? token_embd_ : w("output.weight");
  has_mtp_ = cfg_.n_nextn > 0;
  if (!has_mtp_) return;
  const std::string p = "blk." + std::to_string(cfg_.mtp_block()) + ".";
  mtp_.enorm = f(p + "nextn.enorm.weight");
  mtp_.hnorm = f(p + "nextn.hnorm.weight");
  mtp_.head_norm = gguf_->find_tensor(p + "nextn.shared_head_norm.weight") ? f(p + "nextn.shared_head_norm.weight")
                                                                           : output_norm_;
  mtp_.eh_proj = w(p + "nextn.eh_proj.weight");
  mtp_.embed = gguf_->find_tensor(p + "nextn.embed_tokens.weight") ? w(p + "nextn.embed_tokens.weight")
                                                                   : w("token_embd.weight");
  mtp_.head = gguf_->find_tensor(p + "nextn.shared_head_head.weight") ? w(p + "nextn.shared_head_head.weight") : output_;
  mtp_.block = bind_layer(cfg_.mtp_block(), LayerKind::kFullAttention);
}

// ---- sequence state ------------------------------------------------------------------------------

// Numbers the stage's attention layers (KV pools) and GDN layers (parts of a state slot).
CacheShapes Qwen35Stage::cache_shapes() {
  CacheShapes c;
  for (const LayerWeights& lw : layers_) {
    const bool attn = lw.kind == LayerKind::kFullAttention;
    cache_index_.push_back(attn ? c.n_attention_layers++ : c.n_gdn_layers++);
  }
  mtp_pool_ = has_mtp_ ? c.n_attention_layers++ : 0;
  c.kv_row_floats = size_t{cfg_.n_head_kv} * cfg_.head_dim;
  c.conv_floats = size_t{cfg_.ssm_conv_kernel - 1} * cfg_.ssm_conv_channels();
  c.ssm_floats = size_t{cfg_.ssm_dt_rank} * cfg_.ssm_d_state * cfg_.ssm_head_v_dim();
  return c;
}

// Validates the whole step before touching any state.
void Qwen35Stage::check_batch(const StepInput& in) const {
  if (in.seqs.empty()) throw ConfigError("empty step");
  if (!is_first() && in.hidden == nullptr) throw ConfigError("stage needs the previous stage's hidden states");
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    const SeqStep& s = in.seqs[i];
    const std::string who = "sequence " + std::to_string(s.seq_id);
    if (s.token_ids.empty()) throw ConfigError(who + ": no tokens");
    for (size_t j = 0; j < i; ++j) {
      if (in.seqs[j].seq_id == s.seq_id) throw ConfigError(who + " appears twice in one step");
    }
    for (int32_t id : s.token_ids) {
      if (id < 0 || static_cast<uint32_t>(id) >= cfg_.n_vocab) throw ConfigError(who + ": token id " + std::to_string(id) + " out of range");
    }
    for (uint32_t r : s.logit_rows) {
      if (r >= s.n_tokens()) throw ConfigError(who + ": logit row " + std::to_string(r) + " outside the step");
    }
    if (s.n_draft > StatePool::kMaxCaptures || s.n_draft >= s.n_tokens()) throw ConfigError(who + ": too many drafts");
    if (opt_.max_context && size_t{s.start_pos} + s.n_tokens() > opt_.max_context) {
      throw ConfigError(who + ": exceeds the context limit of " + std::to_string(opt_.max_context));
    }
  }
  cache_->check_step(in);
}

// Checks the step, places its sequences (slot set-up, block tables) and lays out their rows.
std::vector<SeqSpan> Qwen35Stage::prepare_batch(const StepInput& in) {
  check_batch(in);
  const std::vector<StageCache::Seq*> seqs = cache_->begin_step(in);
  std::vector<SeqSpan> spans;
  size_t offset = 0;
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    spans.push_back({seqs[i], offset, in.seqs[i].n_tokens(), in.seqs[i].start_pos, in.seqs[i].n_draft});
    offset += in.seqs[i].n_tokens();
  }
  set_positions(spans, offset);
  return spans;
}

// Rope positions (3 identical streams: text-only M-RoPE) and the pool row every token's K/V
// goes to, for all attention layers of the step.
void Qwen35Stage::set_positions(const std::vector<SeqSpan>& spans, size_t T) {
  positions_.resize(3 * T);
  kv_rows_.clear();
  for (const SeqSpan& s : spans) {
    for (size_t j = 0; j < s.n_tokens; ++j) {
      const auto pos = static_cast<int32_t>(s.start_pos + j);
      for (size_t stream = 0; stream < 3; ++stream) positions_[stream * T + s.offset + j] = pos;
    }
    cache_->append_pool_rows(*s.seq, s.start_pos, s.n_tokens, &kv_rows_);
  }
}

// ---- layers ----------------------------------------------------------------------------------------

// The GDN conv and recurrence piece by piece (prefill chunks, verify rows with their state
// captures, mixed steps): one launch per piece. g / beta: every row's gates, or null when every
// span is a verify row (their recurrences compute the gates from in.gates themselves).
void Qwen35Stage::gdn_pieces_one_by_one(const LayerWeights& lw, size_t gl, const std::vector<SeqSpan>& spans, size_t T,
                                        bool single_tokens, const GdnInputs& in, float* conv, const float* g,
                                        const float* beta, float* o) {
  const float* qkv = in.qkv;
  const size_t C = cfg_.ssm_conv_channels(), nk = cfg_.ssm_n_group, nv = cfg_.ssm_dt_rank;
  const size_t dk = cfg_.ssm_d_state, dv = cfg_.ssm_head_v_dim(), Kc = cfg_.ssm_conv_kernel;
  StatePool& st = cache_->states();
  for (const SeqSpan& s : spans) {
    if (single_tokens && is_verify_row(s)) {
      // A verify row (one token, then its drafts): its pieces' fused conv in one pass that
      // captures the window after each of its first n_draft tokens (Backend::conv_silu_l2_captured).
      be_->conv_silu_l2_captured(qkv + s.offset * C, C, s.n_tokens, lw.gdn.conv, Kc, st.conv(s.seq->slot, gl), 2 * nk,
                                 dk, cfg_.rms_eps, conv + s.offset * C, s.n_draft, st.capture_layer(s.seq->slot, 0, gl),
                                 st.record_floats());
      continue;
    }
    for (const GdnPiece& p : gdn_pieces(s)) {
      if (single_tokens) {
        be_->conv_silu_l2_token(qkv + p.offset * C, C, lw.gdn.conv, Kc, st.conv(s.seq->slot, gl), 2 * nk, dk,
                                cfg_.rms_eps, conv + p.offset * C);
      } else {
        be_->causal_conv1d_silu(qkv + p.offset * C, C, p.n_tokens, C, lw.gdn.conv, Kc, st.conv(s.seq->slot, gl),
                                conv + p.offset * C);
      }
      if (p.capture >= 0) st.capture_conv(s.seq->slot, static_cast<uint32_t>(p.capture), gl);
    }
  }
  // Otherwise L2-normalize every q and k head in place: the 2*nk heads of a token are contiguous
  // rows of dk, so short steps take one launch per token instead of one per head.
  if (single_tokens) {
    // normalized by conv_silu_l2_token above
  } else if (T < 2 * nk) {
    for (size_t t = 0; t < T; ++t) be_->l2_norm(conv + t * C, dk, cfg_.rms_eps, 2 * nk, dk, conv + t * C, dk);
  } else {
    be_->l2_norm_heads(conv, C, T, 2 * nk, dk, cfg_.rms_eps);
  }
  for (const SeqSpan& s : spans) {
    if (is_verify_row(s)) {
      // A verify row (one token, then its drafts): one pass that captures the state after each
      // of its first n_draft tokens, the pieces' bits (Backend::gdn_captured).
      const float* q = conv + s.offset * C;
      const GdnShape shape{s.n_tokens, nk, nv, dk, dv, C, C};
      float* state = st.ssm(s.seq->slot, gl);
      float* captures = st.capture_ssm_at(s.seq->slot, 0, gl);
      if (g == nullptr) {
        be_->gdn_captured(shape, q, q + nk * dk, q + 2 * nk * dk, raw_gate_rows(in.gates, s.offset), state,
                          o + s.offset * nv * dv, s.n_draft, captures, st.record_floats());
      } else {
        be_->gdn_captured(shape, q, q + nk * dk, q + 2 * nk * dk, g + s.offset * nv, beta + s.offset * nv, state,
                          o + s.offset * nv * dv, s.n_draft, captures, st.record_floats());
      }
      continue;
    }
    for (const GdnPiece& p : gdn_pieces(s)) {
      const float* q = conv + p.offset * C;
      const GdnShape shape{p.n_tokens, nk, nv, dk, dv, C, C};
      be_->gdn(shape, q, q + nk * dk, q + 2 * nk * dk, g + p.offset * nv, beta + p.offset * nv, st.ssm(s.seq->slot, gl),
               o + p.offset * nv * dv);
      if (p.capture >= 0) st.capture_ssm(s.seq->slot, static_cast<uint32_t>(p.capture), gl);
    }
  }
}

// The GDN input projections of T rows: returns the raw conv input qkv [T, C], the output gate z
// [T, nv*dv] (rows of one stacked product at T == 1 when the backend stacks) and the raw gate
// rows; the gates themselves are computed by the caller (gdn_layer) or inside the decode launch.
Qwen35Stage::GdnInputs Qwen35Stage::gdn_projections(const LayerWeights& lw, size_t T) {
  const size_t D = cfg_.n_embd, C = cfg_.ssm_conv_channels(), nv = cfg_.ssm_dt_rank, dv = cfg_.ssm_head_v_dim();
  const float* x = ws_.get(Slot::kNorm, T * D);
  // Stacked [alpha | beta_raw] rows of 2*nv floats.
  const auto stacked_gates = [&](const float* alpha) {
    return GdnRawGates{alpha, 2 * nv, alpha + nv, 2 * nv, lw.gdn.a, lw.gdn.dt_bias};
  };
  if (T == 1 && lw.gdn.in_proj.data != nullptr) {
    // One token: one GEMV over [qkv ; gate ; alpha ; beta]; its row splits into [qkv | z | alpha | beta_raw].
    float* qkv = ws_.get(Slot::kProjA, C + nv * dv + 2 * nv);
    be_->matmul(lw.gdn.in_proj, x, D, 1, qkv, C + nv * dv + 2 * nv);
    return {qkv, qkv + C, stacked_gates(qkv + C + nv * dv)};
  }
  GdnInputs in{ws_.get(Slot::kProjA, T * C), ws_.get(Slot::kProjB, T * nv * dv), {}};
  if (lw.gdn.in_proj.data != nullptr && be_->stacks_multi_token(T)) {  // one pass, rows to q/k/v, z, alpha|beta
    float* alpha = ws_.get(Slot::kAlpha, T * 2 * nv);
    const Backend::RowOutput outs[] = {{C, in.qkv, C}, {nv * dv, in.z, nv * dv}, {2 * nv, alpha, 2 * nv}};
    be_->matmul_rows(lw.gdn.in_proj, x, D, T, outs, 3);
    in.gates = stacked_gates(alpha);
    return in;
  }
  if (T == 1 && lw.gdn.qkv_gate.data != nullptr) {
    // One token: one GEMV over [qkv ; gate]; its single output row splits into [qkv | z].
    in.qkv = ws_.get(Slot::kProjA, C + nv * dv);
    in.z = in.qkv + C;
    be_->matmul(lw.gdn.qkv_gate, x, D, 1, in.qkv, C + nv * dv);
  } else {
    be_->matmul(lw.gdn.qkv, x, D, T, in.qkv, C);
    be_->matmul(lw.gdn.gate, x, D, T, in.z, nv * dv);
  }
  if (lw.gdn.alpha_beta.data != nullptr) {  // rows [alpha | beta_raw], read with stride 2*nv
    float* alpha = ws_.get(Slot::kAlpha, T * 2 * nv);
    be_->matmul(lw.gdn.alpha_beta, x, D, T, alpha, 2 * nv);
    in.gates = stacked_gates(alpha);
  } else {
    float* alpha = ws_.get(Slot::kAlpha, T * nv);
    float* beta_raw = ws_.get(Slot::kBeta, T * nv);
    be_->matmul(lw.gdn.alpha, x, D, T, alpha, nv);
    be_->matmul(lw.gdn.beta, x, D, T, beta_raw, nv);
    in.gates = GdnRawGates{alpha, nv, beta_raw, nv, lw.gdn.a, lw.gdn.dt_bias};
  }
  return in;
}

// A plain decode step: every sequence's conv and recurrence in one launch each (the recurrence
// computes the gates from their raw rows itself), states addressed by their pool slot.
void Qwen35Stage::gdn_decode_all(const LayerWeights& lw, size_t gl, const std::vector<SeqSpan>& spans,
                                 const GdnInputs& in, float* conv, float* o) {
  const size_t C = cfg_.ssm_conv_channels(), nk = cfg_.ssm_n_group, nv = cfg_.ssm_dt_rank;
  const size_t dk = cfg_.ssm_d_state, dv = cfg_.ssm_head_v_dim(), Kc = cfg_.ssm_conv_kernel;
  StatePool& st = cache_->states();
  slots_.clear();
  for (const SeqSpan& s : spans) slots_.push_back(s.seq->slot);
  be_->conv_silu_l2_slots(in.qkv, C, lw.gdn.conv, Kc, st.conv(0, gl), st.record_floats(), slots_.data(), spans.size(),
                          2 * nk, dk, cfg_.rms_eps, conv);
  const GdnShape token_shape{1, nk, nv, dk, dv, C, C};
  be_->gdn_decode_slots(token_shape, conv, conv + nk * dk, conv + 2 * nk * dk, in.gates, st.ssm(0, gl),
                        st.record_floats(), slots_.data(), spans.size(), o);
}

void Qwen35Stage::gdn_layer(const LayerWeights& lw, size_t local, const std::vector<SeqSpan>& spans, size_t T) {
  const size_t D = cfg_.n_embd, C = cfg_.ssm_conv_channels(), nv = cfg_.ssm_dt_rank, dv = cfg_.ssm_head_v_dim();
  float* conv = ws_.get(Slot::kConv, T * C);  // silu(conv) [T, C] = [q | k | v]
  float* o = ws_.get(Slot::kMix, T * nv * dv);
  float* y = ws_.get(Slot::kGated, T * nv * dv);
  const GdnInputs in = gdn_projections(lw, T);
  const size_t gl = cache_index_[local];
  // Conv for all rows, then the recurrence: each captures its own state after every piece.
  // When every piece is one token, conv + SiLU + the q/k L2 norms go together
  // (Backend::conv_silu_l2_token); a plain decode step runs all its sequences at once.
  bool single_tokens = true;
  for (const SeqSpan& s : spans) {
    for (const GdnPiece& p : gdn_pieces(s)) single_tokens = single_tokens && p.n_tokens == 1;
  }
  if (single_tokens && one_row_per_span(spans)) {
    gdn_decode_all(lw, gl, spans, in, conv, o);
  } else if (all_verify_rows(spans)) {  // speculation alone: the gates inside each row's recurrence launch
    gdn_pieces_one_by_one(lw, gl, spans, T, single_tokens, in, conv, nullptr, nullptr, o);
  } else {
    float* g = ws_.get(Slot::kGateG, T * nv);
    float* beta = ws_.get(Slot::kGateBeta, T * nv);
    const GdnRawGates& r = in.gates;
    be_->gdn_gates(r.alpha, r.alpha_stride, r.beta_raw, r.beta_stride, r.a, r.dt_bias, T, nv, g, beta);
    gdn_pieces_one_by_one(lw, gl, spans, T, single_tokens, in, conv, g, beta, o);
  }
  be_->gated_rms_norm(o, in.z, lw.gdn.ssm_norm, cfg_.rms_eps, T * nv, dv, y);
  float* mixed = ws_.get(Slot::kOut, T * D);
  be_->matmul(lw.gdn.out, y, nv * dv, T, mixed, D);
}

void Qwen35Stage::attention_layer(const LayerWeights& lw, const std::vector<SeqSpan>& spans, size_t T, bool mtp,
                                  size_t local) {
  const size_t D = cfg_.n_embd, H = cfg_.n_head, Hkv = cfg_.n_head_kv, d = cfg_.head_dim;
  const float* x = ws_.get(Slot::kNorm, T * D);
  float* qg = ws_.get(Slot::kProjA, T * 2 * H * d);  // per head [query | gate]
  float* k = ws_.get(Slot::kProjB, T * Hkv * d);
  float* v = ws_.get(Slot::kProjC, T * Hkv * d);
  float* o = ws_.get(Slot::kMix, T * H * d);
  float* y = ws_.get(Slot::kGated, T * H * d);

  if (lw.attn.qkv.data != nullptr && T == 1) {  // one GEMV; its row splits into [q | k | v]
    qg = ws_.get(Slot::kProjA, 2 * H * d + 2 * Hkv * d);
    k = qg + 2 * H * d;
    v = k + Hkv * d;
    be_->matmul(lw.attn.qkv, x, D, 1, qg, 2 * H * d + 2 * Hkv * d);
  } else if (lw.attn.qkv.data != nullptr && be_->stacks_multi_token(T)) {
    const Backend::RowOutput outs[] = {{2 * H * d, qg, 2 * H * d}, {Hkv * d, k, Hkv * d}, {Hkv * d, v, Hkv * d}};
    be_->matmul_rows(lw.attn.qkv, x, D, T, outs, 3);
  } else {
    be_->matmul(lw.attn.q, x, D, T, qg, 2 * H * d);
    be_->matmul(lw.attn.k, x, D, T, k, Hkv * d);
    be_->matmul(lw.attn.v, x, D, T, v, Hkv * d);
  }
  // q and k heads normed and roped, and every token's K/V row written to its sequence's page
  // (one op: Backend::attention_prep); then each sequence attends over its rows through its
  // block table.
  const size_t pool = mtp ? mtp_pool_ : cache_index_[local];
  float* k_pool = cache_->kv().k(pool);
  float* v_pool = cache_->kv().v(pool);
  AttentionPrep prep;
  prep.n_tokens = T;
  prep.n_heads = H;
  prep.n_kv_heads = Hkv;
  prep.head_dim = d;
  prep.qg = qg;
  prep.q_head_stride = 2 * d;
  prep.k = k;
  prep.v = v;
  prep.q_norm = lw.attn.q_norm;
  prep.k_norm = lw.attn.k_norm;
  prep.eps = cfg_.rms_eps;
  prep.n_rot = cfg_.n_rot;
  prep.positions = positions_.data();
  prep.sections = cfg_.rope_sections;
  prep.theta = cfg_.rope_theta;
  prep.kv_rows = kv_rows_.data();
  prep.k_pool = k_pool;
  prep.v_pool = v_pool;
  be_->attention_prep(prep);
  attend(spans, k_pool, v_pool, qg, o);
  be_->sigmoid_gate(o, d, qg + d, 2 * d, T * H, d, y, d);
  float* mixed = ws_.get(Slot::kOut, T * D);
  be_->matmul(lw.attn.o, y, H * d, T, mixed, D);
}

// Each sequence attends over its cache rows through its block table; q rows are [H][query | gate].
// A plain decode step of several sequences is one batched call (Backend::attention_decode_batch:
// the same result per sequence, one launch pair on CUDA); anything else goes sequence by sequence.
void Qwen35Stage::attend(const std::vector<SeqSpan>& spans, const float* k_pool, const float* v_pool,
                         const float* qg, float* o) {
  const size_t H = cfg_.n_head, Hkv = cfg_.n_head_kv, d = cfg_.head_dim, row = Hkv * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t block_size = cache_->kv().block_size();
  if (spans.size() >= 2 && one_row_per_span(spans)) {
    decode_seqs_.clear();
    for (const SeqSpan& s : spans) {
      decode_seqs_.push_back(
          DecodeAttentionSeq{size_t{s.start_pos} + 1, s.offset * 2 * H * d, s.offset * H * d, s.seq->table.data()});
    }
    be_->attention_decode_batch(DecodeAttentionBatch{H, Hkv, d, 2 * d, row, k_pool, v_pool, block_size, scale, qg, o,
                                                     decode_seqs_.data(), decode_seqs_.size()});
    return;
  }
  for (const SeqSpan& s : spans) {
    const size_t kv_len = size_t{s.start_pos} + s.n_tokens;
    const AttentionShape shape{s.n_tokens, kv_len, H, Hkv, d, 2 * H * d, 2 * d, row, H * d};
    const KvPages pages{k_pool, v_pool, s.seq->table.data(), block_size};
    be_->attention_causal(shape, qg + s.offset * 2 * H * d, pages, scale, o + s.offset * H * d);
  }
}

// The FFN half of a block; kNorm holds RMSNorm(h) (post_norm) on entry. The residual add goes
// with the next block's attn_norm (`next_norm`) when there is one: kNorm then holds its input.
void Qwen35Stage::ffn(const LayerWeights& lw, size_t T, const float* next_norm) {
  const size_t D = cfg_.n_embd, F = cfg_.n_ff;
  float* x = ws_.get(Slot::kHidden, T * D);
  float* b = ws_.get(Slot::kNorm, T * D);
  float* gate = ws_.get(Slot::kProjA, T * F);
  float* up = ws_.get(Slot::kProjB, T * F);
  float* down = ws_.get(Slot::kOut, T * D);
  if (T == 1 && lw.ffn_gate_up.data != nullptr) {  // one GEMV; the row splits into [gate | up]
    gate = ws_.get(Slot::kProjA, 2 * F);
    up = gate + F;
    be_->matmul(lw.ffn_gate_up, b, D, 1, gate, 2 * F);
  } else if (lw.ffn_gate_up.data != nullptr && be_->stacks_multi_token(T)) {  // one pass, rows to gate / up
    const Backend::RowOutput outs[] = {{F, gate, F}, {F, up, F}};
    be_->matmul_rows(lw.ffn_gate_up, b, D, T, outs, 2);
  } else {
    be_->matmul(lw.ffn_gate, b, D, T, gate, F);
    be_->matmul(lw.ffn_up, b, D, T, up, F);
  }
  be_->swiglu_matmul(gate, up, T, lw.ffn_down, down, D);  // cols of ffn_down = F
  if (next_norm != nullptr) {
    be_->add_rms_norm(x, down, next_norm, cfg_.rms_eps, T, D, b);
  } else {
    be_->add_inplace(x, down, T * D);
  }
}

// One decoder block: h += Mixer(RMSNorm(h)); h += FFN(RMSNorm(h)). Each residual add runs in one
// pass with the norm after it (Backend::add_rms_norm: one launch on CUDA). `normed`: the previous
// block already left RMSNorm(h; attn_norm) in kNorm; `next_norm`: see ffn().
void Qwen35Stage::run_layer(const LayerWeights& lw, size_t local, const std::vector<SeqSpan>& spans, size_t T,
                            bool mtp, bool normed, const float* next_norm) {
  const size_t D = cfg_.n_embd;
  float* x = ws_.get(Slot::kHidden, T * D);
  float* b = ws_.get(Slot::kNorm, T * D);
  if (!normed) be_->rms_norm(x, D, lw.attn_norm, cfg_.rms_eps, T, D, b, D);
  if (lw.kind == LayerKind::kLinearAttention) {
    gdn_layer(lw, local, spans, T);
  } else {
    attention_layer(lw, spans, T, mtp, local);
  }
  be_->add_rms_norm(x, ws_.get(Slot::kOut, T * D), lw.post_norm, cfg_.rms_eps, T, D, b);
  ffn(lw, T, next_norm);
}

// ---- step ------------------------------------------------------------------------------------------

// With `digest_rows` (one per row) the backend may digest the logits where they are: then
// `digests` is filled and `logits` left empty; otherwise the logits come back as usual.
void Qwen35Stage::lm_head(const float* rows, size_t n_rows, const float* norm, const WeightView& head,
                          std::vector<float>* logits, std::vector<float>* normed_out,
                          const DigestRequest* digest_rows, std::vector<LogitDigest>* digests) {
  const size_t D = cfg_.n_embd, V = head.rows;
  float* normed = ws_.get(Slot::kHeadNorm, n_rows * D);
  float* out = ws_.get(Slot::kLogits, n_rows * V);
  be_->rms_norm(rows, D, norm, cfg_.rms_eps, n_rows, D, normed, D);
  be_->matmul(head, normed, D, n_rows, out, V);
  bool digested = false;
  if (digest_rows != nullptr && digests != nullptr) {
    digests->resize(n_rows);
    digested = be_->digest_logits_rows(out, n_rows, V, digest_rows, digests->data());
    if (!digested) digests->clear();
  }
  if (digested) {
    logits->clear();
  } else {
    logits->resize(n_rows * V);
    be_->download(logits->data(), out, n_rows * V);
  }
  if (normed_out != nullptr) {
    normed_out->resize(n_rows * D);
    be_->download(normed_out->data(), normed, n_rows * D);
  }
}

void Qwen35Stage::forward(const StepInput& in, StepOutput* out) {
  // The last step's deferred output may still be on its way: nothing of this step is queued or
  // staged before it is done (normally long done: the next stage waited for it). Its errors, if
  // any, surface here.
  if (output_in_flight_) {
    output_in_flight_ = false;
    be_->synchronize();
  }
  const std::vector<SeqSpan> spans = prepare_batch(in);
  const size_t D = cfg_.n_embd;
  const size_t T = spans.back().offset + spans.back().n_tokens;
  float* x = ws_.get(Slot::kHidden, T * D);
  if (is_first()) {
    std::vector<int32_t> ids;
    for (const SeqStep& s : in.seqs) ids.insert(ids.end(), s.token_ids.begin(), s.token_ids.end());
    be_->embed_rows(token_embd_, ids.data(), T, x);
  } else {
    if (in.hidden_ready && in.hidden_ready_on_host) {
      in.hidden_ready.wait();
    } else if (in.hidden_ready) {
      be_->wait_host_signal(in.hidden_ready);
    }
    be_->upload(x, in.hidden, T * D);
  }
  layer_hidden_.clear();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const float* next_norm = l + 1 < layers_.size() ? layers_[l + 1].attn_norm : nullptr;
    run_layer(layers_[l], l, spans, T, false, l > 0, next_norm);
    if (opt_.keep_all_hidden) {
      layer_hidden_.emplace_back(T * D);
      be_->download(layer_hidden_.back().data(), x, T * D);
    }
  }
  cache_->end_step(in);

  out->hidden.clear();
  out->logits.clear();
  out->final_hidden.clear();
  out->digests.clear();
  out->digest_n_vocab = 0;
  out->hidden_deferred = false;
  if (!is_last()) {
    if (in.hidden_out != nullptr && in.hidden_out_ready) {
      be_->download_signalled(in.hidden_out, x, T * D, in.hidden_out_ready);
      out->hidden_deferred = output_in_flight_ = true;
      return;
    }
    float* dst = in.hidden_out;
    if (dst == nullptr) {
      out->hidden.resize(T * D);
      dst = out->hidden.data();
    }
    be_->download(dst, x, T * D);
    return;
  }
  std::vector<uint32_t> rows;
  for (size_t i = 0; i < spans.size(); ++i) {
    for (uint32_t r : in.seqs[i].logit_rows) rows.push_back(static_cast<uint32_t>(spans[i].offset) + r);
  }
  if (in.all_final_hidden) {  // MTP catch-up needs h of every row; same norm as the head's
    float* normed = ws_.get(Slot::kHeadNorm, T * D);
    be_->rms_norm(x, D, output_norm_, cfg_.rms_eps, T, D, normed, D);
    out->final_hidden.resize(T * D);
    be_->download(out->final_hidden.data(), normed, T * D);
  }
  if (rows.empty()) return;
  float* picked = ws_.get(Slot::kPicked, rows.size() * D);
  be_->gather_rows(x, rows.data(), rows.size(), D, picked);
  const bool digest = in.digest_rows.size() == rows.size();  // else (absent or inconsistent): full logits
  lm_head(picked, rows.size(), output_norm_, output_, &out->logits, in.all_final_hidden ? nullptr : &out->final_hidden,
          digest ? in.digest_rows.data() : nullptr, digest ? &out->digests : nullptr);
  if (!out->digests.empty()) out->digest_n_vocab = static_cast<uint32_t>(output_.rows);
}

// MTP rows: u = eh_proj([enorm(embed(token)) ; hnorm(hidden)]), one attention block with its
// own KV cache, shared-head norm, LM head (spec §7.1).
void Qwen35Stage::forward_mtp(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids,
                              const float* hidden, std::vector<float>* logits, std::vector<float>* out_hidden) {
  float* x = run_mtp_block(seq_id, start_pos, token_ids, hidden);
  lm_head(x, token_ids.size(), mtp_.head_norm, mtp_.head, logits, out_hidden);
}

// Drafting reads only the last row: the head runs on that row alone (the catch-up rows' logits
// were never used) and, given a digest request, only the digest leaves the device.
bool Qwen35Stage::forward_mtp_last(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids,
                                   const float* hidden, const DigestRequest* digest, LogitDigest* last_digest,
                                   std::vector<float>* last_logits, std::vector<float>* last_hidden) {
  const float* x = run_mtp_block(seq_id, start_pos, token_ids, hidden);
  const float* last = x + (token_ids.size() - 1) * cfg_.n_embd;
  std::vector<LogitDigest> digests;
  // A draft among the first draft_vocab ids reads only those rows of the head (rows are
  // contiguous in every layout, split rows included); verification keeps the output exact.
  const size_t V = mtp_.head.rows;
  const WeightView head = opt_.draft_vocab > 0 && opt_.draft_vocab < V ? row_range(mtp_.head, 0, opt_.draft_vocab) : mtp_.head;
  lm_head(last, 1, mtp_.head_norm, head, last_logits, last_hidden, digest, digest ? &digests : nullptr);
  if (digests.empty()) return false;
  *last_digest = std::move(digests[0]);
  return true;
}

// The MTP block over the rows; returns its output rows (device, [n, n_embd]) for the head.
float* Qwen35Stage::run_mtp_block(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids,
                                  const float* hidden) {
  if (!has_mtp_) throw ConfigError("this stage has no MTP block (not the last stage, or the GGUF has none)");
  if (token_ids.empty()) throw ConfigError("MTP step without tokens");
  for (int32_t id : token_ids) {
    if (id < 0 || static_cast<uint32_t>(id) >= cfg_.n_vocab) throw ConfigError("MTP token id out of range");
  }
  StageCache::Seq& seq = cache_->begin_mtp(seq_id, start_pos, token_ids.size());
  const size_t D = cfg_.n_embd, T = token_ids.size();
  const std::vector<SeqSpan> spans{{&seq, 0, T, start_pos}};
  set_positions(spans, T);
  float* e = ws_.get(Slot::kProjA, T * D);
  float* h = ws_.get(Slot::kProjB, T * D);
  float* cat = ws_.get(Slot::kConv, T * 2 * D);  // row t = [enorm(e_t) ; hnorm(h_t)]
  be_->embed_rows(mtp_.embed, token_ids.data(), T, e);
  be_->upload(h, hidden, T * D);
  be_->rms_norm(e, D, mtp_.enorm, cfg_.rms_eps, T, D, cat, 2 * D);
  be_->rms_norm(h, D, mtp_.hnorm, cfg_.rms_eps, T, D, cat + D, 2 * D);
  float* x = ws_.get(Slot::kHidden, T * D);
  be_->matmul(mtp_.eh_proj, cat, 2 * D, T, x, D);
  run_layer(mtp_.block, 0, spans, T, true);
  seq.mtp_n_past = start_pos + static_cast<uint32_t>(T);
  return x;
}

}  // namespace

std::unique_ptr<StageModel> load_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                       StageRange range, const StageOptions& options,
                                       std::unique_ptr<Backend> backend) {
  if (config.arch != "qwen35") throw ConfigError("load_stage: architecture '" + config.arch + "' is not qwen35");
  return std::make_unique<Qwen35Stage>(std::move(gguf), config, range, options, std::move(backend));
}

std::unique_ptr<StageModel> load_cpu_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                           StageRange range, const StageOptions& options) {
  return load_stage(std::move(gguf), config, range, options, make_cpu_backend(options.n_threads));
}

}  // namespace ds
