// The Qwen3.5 / Qwen3.6 hybrid stack (worker/models/hybrid_stage.h): one pipeline stage, its
// hyper-parameters and tensors, and a forward that is a list of blocks (worker/blocks/), the FFN
// block bound by the architecture's file. Formulas: qwen35-model-spec.md §4 (gated attention),
// §5 (Gated DeltaNet), §6 (block, FFN, head), §7 (MTP).
//
// A step processes a batch of sequences with different lengths and start positions; token
// rows of all sequences are concatenated so the projections run as one matmul, while conv,
// recurrence and attention run per sequence over that sequence's state. State lives in pools
// (worker/cache): GDN layers use the sequence's state slot, attention layers read and write
// K/V through its block table.
#include "worker/models/hybrid_stage.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "common/stage_footprint.h"
#include "worker/backend.h"
#include "worker/blocks/gated_attention.h"
#include "worker/blocks/gated_delta_net.h"
#include "worker/blocks/image_embedder.h"
#include "worker/blocks/lm_head.h"
#include "worker/blocks/spans.h"
#include "worker/blocks/step_layout.h"
#include "worker/blocks/workspace.h"
#include "worker/cache/stage_cache.h"
#include "worker/stage_model.h"

namespace ds {
namespace {

// ---- weights ---------------------------------------------------------------------------------

struct LayerWeights {
  LayerKind kind = LayerKind::kLinearAttention;
  const float* attn_norm = nullptr;
  const float* post_norm = nullptr;
  AttentionWeights attn;
  GdnWeights gdn;
  std::unique_ptr<FfnBlock> ffn;
};

struct MtpWeights {
  const float* enorm = nullptr;
  const float* hnorm = nullptr;
  const float* head_norm = nullptr;
  WeightView eh_proj, embed, head;
  LayerWeights block;
};

class HybridStage final : public StageModel {
 public:
  HybridStage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config, StageRange range,
              const StageOptions& options, std::unique_ptr<Backend> backend, FfnBinder bind_ffn)
      : gguf_(std::move(gguf)),
        cfg_(config),
        range_(range),
        opt_(options),
        be_(std::move(backend)),
        ws_(*be_),
        bind_ffn_(std::move(bind_ffn)) {
    bind_weights();
    cache_ = std::make_unique<StageCache>(*be_, opt_.cache, cache_shapes());
    if (opt_.mmproj && is_first()) embedder_ = std::make_unique<ImageEmbedder>(opt_.mmproj, *be_, cfg_);
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
  Backend& backend() override { return *be_; }
  float* input_rows(size_t n_tokens) override { return ws_.get(Slot::kHidden, n_tokens * cfg_.n_embd); }
  const float* output_rows() const override { return output_rows_; }

 private:
  void bind_weights();
  LayerWeights bind_layer(uint32_t il, LayerKind kind);
  WeightView w(const std::string& name) const { return be_->weight(gguf_->tensor(name)); }
  WeightView stacked(const std::vector<std::string>& names, const std::vector<WeightView*>& parts) const;
  const float* f(const std::string& name) const { return be_->f32_tensor(gguf_->tensor(name)); }

  CacheShapes cache_shapes();
  void prepare_images(const StepInput& in);
  float* run_mtp_block(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids, const float* hidden);

  StepContext context(const std::vector<SeqSpan>& spans, size_t T);
  void run_layer(const StepContext& ctx, const LayerWeights& lw, uint32_t layer, size_t state_index,
                 bool normed = false, const float* next_norm = nullptr);
  void lm_head(const float* rows, size_t n_rows, const float* norm, const WeightView& head, std::vector<float>* logits,
               std::vector<float>* normed_out, const DigestRequest* digest_rows = nullptr,
               std::vector<LogitDigest>* digests = nullptr, const std::vector<LogitEdit>* edits = nullptr,
               const PendingTokenMasks* masks = nullptr);

  std::shared_ptr<const GgufFile> gguf_;
  ModelConfig cfg_;
  StageRange range_;
  StageOptions opt_;
  std::unique_ptr<Backend> be_;
  Workspace ws_;
  FfnBinder bind_ffn_;

  WeightView token_embd_, output_;
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  bool has_mtp_ = false;
  MtpWeights mtp_;

  // Per local layer: its KV pool (attention) or its place in a state slot (GDN); the MTP
  // block's attention has the pool after the main layers'.
  std::vector<size_t> cache_index_;
  size_t mtp_pool_ = 0;
  std::unique_ptr<StageCache> cache_;        // after be_: released before the backend goes
  std::unique_ptr<ImageEmbedder> embedder_;  // stage 0 with an mmproj; after be_ likewise
  std::vector<int32_t> positions_;           // host [3][T]
  std::vector<uint32_t> kv_rows_;            // host [T]: pool row of every token of the step
  BlockScratch block_scratch_;
  std::vector<std::vector<float>> layer_hidden_;
  const float* output_rows_ = nullptr;  // the residual stream the last forward() left
};

// ---- loading ---------------------------------------------------------------------------------------

// Matrices that share an input, stacked row-wise when the backend can (one product for all at
// decode); `parts` get their own views either way (row ranges of the stack, or separate).
// A stack and its first part share a data pointer; the stacks run at T == 1 (GEMV) and, where
// Backend::stacks_multi_token says so, in small multi-token steps (matmul_rows), never in prefill
// (except alpha_beta, whose parts then never run), so a cache keyed by that pointer (CudaBackend's
// bf16 prefill copies, which the small multi-token products never ask for) meets one shape only.
WeightView HybridStage::stacked(const std::vector<std::string>& names, const std::vector<WeightView*>& parts) const {
  return stack_weights(*be_, *gguf_, names, parts);
}

LayerWeights HybridStage::bind_layer(uint32_t il, LayerKind kind) {
  const std::string p = "blk." + std::to_string(il) + ".";
  LayerWeights lw;
  lw.kind = kind;
  lw.attn_norm = f(p + "attn_norm.weight");
  lw.post_norm = f(p + "post_attention_norm.weight");
  if (kind == LayerKind::kFullAttention) {
    lw.attn.o = w(p + "attn_output.weight");
    lw.attn.q_norm = f(p + "attn_q_norm.weight");
    lw.attn.k_norm = f(p + "attn_k_norm.weight");
    lw.attn.qkv =
        stacked({p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, {&lw.attn.q, &lw.attn.k, &lw.attn.v});
  } else {
    lw.gdn = {{},
              {},
              {},
              {},
              w(p + "ssm_out.weight"),
              f(p + "ssm_conv1d.weight"),
              f(p + "ssm_dt.bias"),
              f(p + "ssm_a"),
              f(p + "ssm_norm.weight"),
              {},
              {},
              {}};
    lw.gdn.in_proj =
        stacked({p + "attn_qkv.weight", p + "attn_gate.weight", p + "ssm_alpha.weight", p + "ssm_beta.weight"},
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
  lw.ffn = bind_ffn_(*be_, *gguf_, p);
  return lw;
}

void HybridStage::bind_weights() {
  if (range_.first_layer >= range_.last_layer || range_.last_layer > cfg_.n_layer) {
    throw ConfigError("invalid layer range [" + std::to_string(range_.first_layer) + ", " +
                      std::to_string(range_.last_layer) + ") for a model with " + std::to_string(cfg_.n_layer) +
                      " layers");
  }
  if (is_first() || (is_last() && cfg_.tied_embeddings)) token_embd_ = w("token_embd.weight");
  for (uint32_t il = range_.first_layer; il < range_.last_layer; ++il)
    layers_.push_back(bind_layer(il, cfg_.layer_kinds[il]));
  if (!is_last()) return;
  output_norm_ = f("output_norm.weight");
  output_ = cfg_.tied_embeddings ? token_embd_ : w("output.weight");
  has_mtp_ = cfg_.n_nextn > 0;
  if (!has_mtp_) return;
  const std::string p = "blk." + std::to_string(cfg_.mtp_block()) + ".";
  mtp_.enorm = f(p + "nextn.enorm.weight");
  mtp_.hnorm = f(p + "nextn.hnorm.weight");
  mtp_.head_norm =
      gguf_->find_tensor(p + "nextn.shared_head_norm.weight") ? f(p + "nextn.shared_head_norm.weight") : output_norm_;
  mtp_.eh_proj = w(p + "nextn.eh_proj.weight");
  mtp_.embed =
      gguf_->find_tensor(p + "nextn.embed_tokens.weight") ? w(p + "nextn.embed_tokens.weight") : w("token_embd.weight");
  mtp_.head =
      gguf_->find_tensor(p + "nextn.shared_head_head.weight") ? w(p + "nextn.shared_head_head.weight") : output_;
  mtp_.block = bind_layer(cfg_.mtp_block(), LayerKind::kFullAttention);
}

// ---- sequence state ------------------------------------------------------------------------------

// Numbers the stage's attention layers (KV pools) and GDN layers (parts of a state slot).
CacheShapes HybridStage::cache_shapes() {
  size_t attn = 0, gdn = 0;
  for (const LayerWeights& lw : layers_) {
    cache_index_.push_back(lw.kind == LayerKind::kFullAttention ? attn++ : gdn++);
  }
  mtp_pool_ = has_mtp_ ? attn++ : 0;
  const CacheShapes c = stage_cache_shapes(cfg_, range_);  // what pool sizing counted
  if (c.n_attention_layers != attn || c.n_gdn_layers != gdn) {
    throw ConfigError("stage layers disagree with the model's layer kinds");
  }
  return c;
}

// ---- layers ----------------------------------------------------------------------------------------

StepContext HybridStage::context(const std::vector<SeqSpan>& spans, size_t T) {
  return StepContext{*be_,  ws_, *cache_,           block_scratch_,  cfg_,
                     spans, T,   positions_.data(), kv_rows_.data(), opt_.tap ? &opt_.tap : nullptr};
}

// One decoder block: h += Mixer(RMSNorm(h)); h += FFN(RMSNorm(h)). Each residual add runs in one
// pass with the norm after it (Backend::add_rms_norm: one launch on CUDA). `normed`: the previous
// block already left RMSNorm(h; attn_norm) in kNorm; `next_norm`: the next block's attn_norm.
void HybridStage::run_layer(const StepContext& ctx, const LayerWeights& lw, uint32_t layer, size_t state_index,
                            bool normed, const float* next_norm) {
  const size_t D = cfg_.n_embd, T = ctx.T;
  float* h = ws_.get(Slot::kHidden, T * D);
  float* b = ws_.get(Slot::kNorm, T * D);
  if (!normed) be_->rms_norm(h, D, lw.attn_norm, cfg_.rms_eps, T, D, b, D);
  const float* mixed = lw.kind == LayerKind::kLinearAttention ? gated_delta_net(ctx, lw.gdn, state_index, b, layer)
                                                              : gated_attention(ctx, lw.attn, state_index, b, layer);
  be_->add_rms_norm(h, mixed, lw.post_norm, cfg_.rms_eps, T, D, b);
  const float* down = lw.ffn->run(ctx, b, layer);
  // The residual add goes with the next block's attn_norm when there is one: kNorm then holds
  // that block's input.
  if (next_norm != nullptr) {
    be_->add_rms_norm(h, down, next_norm, cfg_.rms_eps, T, D, b);
  } else {
    be_->add_inplace(h, down, T * D);
  }
  tap(ctx, layer, "out", h, D);
}

// ---- step ------------------------------------------------------------------------------------------

// With `digest_rows` (one per row) the backend may digest the logits where they are: then
// `digests` is filled and `logits` left empty; otherwise the logits come back as usual. `edits`
// (biases, masks, penalties) and grammar `masks` change the logits first, on the device
// (worker/blocks/lm_head.h).
void HybridStage::lm_head(const float* rows, size_t n_rows, const float* norm, const WeightView& head,
                          std::vector<float>* logits, std::vector<float>* normed_out, const DigestRequest* digest_rows,
                          std::vector<LogitDigest>* digests, const std::vector<LogitEdit>* edits,
                          const PendingTokenMasks* masks) {
  ds::lm_head(*be_, ws_, LmHeadWeights{norm, head, cfg_.rms_eps}, rows, n_rows, cfg_.n_embd, digest_rows, edits,
              LmHeadOutput{logits, normed_out, digests}, masks);
}

// Vision input, before any state changes: stage 0 checks the step's images and plans their rows
// (write_rows encodes the new ones); a stage that cannot embed refuses pixels or image rows to embed.
void HybridStage::prepare_images(const StepInput& in) {
  if (!is_first()) {
    if (!in.images.empty()) throw ConfigError("image pixels sent to a stage after the first (only stage 0 embeds)");
    return;
  }
  if (!embedder_) {
    if (!in.images.empty() || step_has_image_rows(in))
      throw ConfigError("this worker has no --mmproj: it cannot embed the step's images");
    return;
  }
  embedder_->check(in);
  embedder_->prepare(in);
}

void HybridStage::forward(const StepInput& in, StepOutput* out) {
  check_step(in, StepLimits{cfg_.n_vocab, opt_.max_context, StatePool::kMaxCaptures, cfg_.arch.c_str(), true}, *cache_);
  const bool images = !in.images.empty() ||
                      std::any_of(in.seqs.begin(), in.seqs.end(), [](const SeqStep& s) { return !s.images.empty(); });
  if (images) prepare_images(in);
  const std::vector<SeqSpan> spans = lay_out_step(in, *cache_, &positions_, &kv_rows_);
  const size_t D = cfg_.n_embd;
  const size_t T = spans.back().offset + spans.back().n_tokens;
  float* x = input_rows(T);  // a later stage's input is already there (StageModel::input_rows)
  if (is_first()) {
    std::vector<int32_t> ids;
    for (const SeqStep& s : in.seqs) ids.insert(ids.end(), s.token_ids.begin(), s.token_ids.end());
    be_->embed_rows(token_embd_, ids.data(), T, x);
    if (images && embedder_) embedder_->write_rows(x);
  }
  layer_hidden_.clear();
  const StepContext ctx = context(spans, T);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const float* next_norm = l + 1 < layers_.size() ? layers_[l + 1].attn_norm : nullptr;
    run_layer(ctx, layers_[l], range_.first_layer + static_cast<uint32_t>(l), cache_index_[l], l > 0, next_norm);
    if (opt_.keep_all_hidden) {
      layer_hidden_.emplace_back(T * D);
      be_->download(layer_hidden_.back().data(), x, T * D);
    }
  }
  cache_->end_step(in);

  out->logits.clear();
  out->final_hidden.clear();
  out->digests.clear();
  out->digest_n_vocab = 0;
  output_rows_ = x;
  if (!is_last()) return;
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
          digest ? in.digest_rows.data() : nullptr, digest ? &out->digests : nullptr, &in.logit_edits, &in.token_masks);
  if (!out->digests.empty()) out->digest_n_vocab = static_cast<uint32_t>(output_.rows);
}

// MTP rows: u = eh_proj([enorm(embed(token)) ; hnorm(hidden)]), one attention block with its
// own KV cache, shared-head norm, LM head (spec §7.1).
void HybridStage::forward_mtp(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids,
                              const float* hidden, std::vector<float>* logits, std::vector<float>* out_hidden) {
  float* x = run_mtp_block(seq_id, start_pos, token_ids, hidden);
  lm_head(x, token_ids.size(), mtp_.head_norm, mtp_.head, logits, out_hidden);
}

// Drafting reads only the last row: the head runs on that row alone (the catch-up rows' logits
// were never used) and, given a digest request, only the digest leaves the device.
bool HybridStage::forward_mtp_last(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids,
                                   const float* hidden, const DigestRequest* digest, LogitDigest* last_digest,
                                   std::vector<float>* last_logits, std::vector<float>* last_hidden) {
  const float* x = run_mtp_block(seq_id, start_pos, token_ids, hidden);
  const float* last = x + (token_ids.size() - 1) * cfg_.n_embd;
  std::vector<LogitDigest> digests;
  // A draft among the first draft_vocab ids reads only those rows of the head (rows are
  // contiguous in every layout, split rows included); verification keeps the output exact.
  const size_t V = mtp_.head.rows;
  const WeightView head =
      opt_.draft_vocab > 0 && opt_.draft_vocab < V ? row_range(mtp_.head, 0, opt_.draft_vocab) : mtp_.head;
  lm_head(last, 1, mtp_.head_norm, head, last_logits, last_hidden, digest, digest ? &digests : nullptr);
  if (digests.empty()) return false;
  *last_digest = std::move(digests[0]);
  return true;
}

// The MTP block over the rows; returns its output rows (device, [n, n_embd]) for the head.
float* HybridStage::run_mtp_block(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids,
                                  const float* hidden) {
  if (!has_mtp_) throw ConfigError("this stage has no MTP block (not the last stage, or the GGUF has none)");
  if (token_ids.empty()) throw ConfigError("MTP step without tokens");
  for (int32_t id : token_ids) {
    if (id < 0 || static_cast<uint32_t>(id) >= cfg_.n_vocab) throw ConfigError("MTP token id out of range");
  }
  StageCache::Seq& seq = cache_->begin_mtp(seq_id, start_pos, token_ids.size());
  const size_t D = cfg_.n_embd, T = token_ids.size();
  // A sequence with images ropes its MTP rows by the positions its last step's images give.
  const std::vector<SeqSpan> spans{{&seq, 0, T, start_pos, 0, seq.images.empty() ? nullptr : &seq.images}};
  fill_positions(spans, T, *cache_, &positions_, &kv_rows_);
  float* e = ws_.get(Slot::kProjA, T * D);
  float* h = ws_.get(Slot::kProjB, T * D);
  float* cat = ws_.get(Slot::kConv, T * 2 * D);  // row t = [enorm(e_t) ; hnorm(h_t)]
  be_->embed_rows(mtp_.embed, token_ids.data(), T, e);
  be_->upload(h, hidden, T * D);
  be_->rms_norm(e, D, mtp_.enorm, cfg_.rms_eps, T, D, cat, 2 * D);
  be_->rms_norm(h, D, mtp_.hnorm, cfg_.rms_eps, T, D, cat + D, 2 * D);
  float* x = ws_.get(Slot::kHidden, T * D);
  be_->matmul(mtp_.eh_proj, cat, 2 * D, T, x, D);
  run_layer(context(spans, T), mtp_.block, cfg_.mtp_block(), mtp_pool_);
  seq.mtp_n_past = start_pos + static_cast<uint32_t>(T);
  return x;
}

}  // namespace

std::unique_ptr<StageModel> make_hybrid_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                              StageRange range, const StageOptions& options,
                                              std::unique_ptr<Backend> backend, FfnBinder bind_ffn) {
  if (!config.hybrid()) throw ConfigError("hybrid stage: architecture '" + config.arch + "' is not a Qwen3.5 hybrid");
  return std::make_unique<HybridStage>(std::move(gguf), config, range, options, std::move(backend),
                                       std::move(bind_ffn));
}

}  // namespace ds
