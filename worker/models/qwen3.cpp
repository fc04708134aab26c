// Dense Qwen3 (GGUF arch `qwen3`): one pipeline stage, its hyper-parameters and tensors, and a
// forward that is a list of blocks (worker/blocks/).
//
// The block is qwen35's with the attention mixer in every layer and without its output gate:
// h += Attn(RMSNorm(h; attn_norm)); h += SwiGLU(RMSNorm(h; ffn_norm)). ModelConfig says
// attn_output_gate = false for qwen3, so worker/blocks/gated_attention reads q rows of the query
// alone; per-head q/k RMSNorm, then NEOX RoPE over n_rot = head_dim dims with theta =
// qwen3.rope.freq_base and a single position stream (no M-RoPE sections: every slot reads
// stream 0), GQA over the paged KV cache.
//
// The last stage ends in the head StageOptions::head names:
//  - kLanguageModel: output_norm, then output.weight (or the tied token_embd): logits or digests;
//  - kEmbedding: output_norm only: the requested rows' final-normed hidden (the coordinator pools
//    and L2-normalises);
//  - kRankClassifier: output_norm, then cls.output.weight, or, without it, the label tokens' rows
//    of the LM head copied byte for byte into a small matrix (the same bytes, so the same scores
//    the LM head gives those tokens).
#include "worker/models/qwen3.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "common/stage_footprint.h"
#include "worker/backend.h"
#include "worker/blocks/gated_attention.h"
#include "worker/blocks/lm_head.h"
#include "worker/blocks/spans.h"
#include "worker/blocks/step_layout.h"
#include "worker/blocks/swiglu_ffn.h"
#include "worker/blocks/workspace.h"
#include "worker/cache/stage_cache.h"
#include "worker/stage_model.h"

namespace ds {
namespace {

// ---- weights ---------------------------------------------------------------------------------

struct LayerWeights {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  AttentionWeights attn;
  FfnWeights ffn;
};

class Qwen3Stage final : public StageModel {
 public:
  Qwen3Stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config, StageRange range,
             const StageOptions& options, std::unique_ptr<Backend> backend)
      : gguf_(std::move(gguf)), cfg_(config), range_(range), opt_(options), be_(std::move(backend)), ws_(*be_) {
    bind_weights();
    const CacheShapes shapes = stage_cache_shapes(cfg_, range_);  // what pool sizing counted
    if (shapes.n_gdn_layers != 0 || shapes.n_attention_layers != layers_.size()) {
      throw ConfigError("qwen3 stage: every layer must be a full-attention layer");
    }
    cache_ = std::make_unique<StageCache>(*be_, opt_.cache, shapes);
  }

  const StageRange& range() const override { return range_; }
  bool is_first() const override { return range_.first_layer == 0; }
  bool is_last() const override { return range_.last_layer == cfg_.n_layer; }
  const std::vector<std::vector<float>>& layer_hidden() const override { return layer_hidden_; }

  void forward(const StepInput& in, StepOutput* out) override;
  void forward_mtp(uint64_t /*seq_id*/, uint32_t /*start_pos*/, const std::vector<int32_t>& /*token_ids*/,
                   const float* /*hidden*/, std::vector<float>* /*logits*/,
                   std::vector<float>* /*out_hidden*/) override {
    throw ConfigError("qwen3 has no MTP block: no speculative drafts");
  }
  void drop_sequence(uint64_t seq_id) override { cache_->drop(seq_id); }
  void drop_all() override { cache_->drop_all(); }
  Backend& backend() override { return *be_; }
  float* input_rows(size_t n_tokens) override { return ws_.get(Slot::kHidden, n_tokens * cfg_.n_embd); }
  const float* output_rows() const override { return output_rows_; }

 private:
  void bind_weights();
  void bind_head();
  LayerWeights bind_layer(uint32_t il);
  WeightView label_rows_head();
  WeightView w(const std::string& name) const { return be_->weight(gguf_->tensor(name)); }
  WeightView stacked(const std::vector<std::string>& names, const std::vector<WeightView*>& parts) const;
  const float* f(const std::string& name) const { return be_->f32_tensor(gguf_->tensor(name)); }

  StepContext context(const std::vector<SeqSpan>& spans, size_t T);
  void run_layer(const StepContext& ctx, const LayerWeights& lw, uint32_t layer, size_t kv_pool, bool normed,
                 const float* next_norm);
  void run_head(const StepInput& in, const float* x, size_t T, const std::vector<uint32_t>& rows, StepOutput* out);
  void normed_rows(const float* rows, size_t n, std::vector<float>* host);

  std::shared_ptr<const GgufFile> gguf_;
  ModelConfig cfg_;
  StageRange range_;
  StageOptions opt_;
  std::unique_ptr<Backend> be_;
  Workspace ws_;

  WeightView token_embd_;
  WeightView head_;  // last stage: the LM head, or the rank head (empty for kEmbedding)
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  // The rank head built from LM-head rows: its bytes and the tensor that describes them (the CPU
  // backend computes on them in place, so they live as long as the stage).
  std::vector<uint8_t> label_bytes_;
  GgufTensor label_tensor_;

  std::unique_ptr<StageCache> cache_;  // after be_: released before the backend goes
  std::vector<int32_t> positions_;     // host [3][T]
  std::vector<uint32_t> kv_rows_;      // host [T]: pool row of every token of the step
  BlockScratch block_scratch_;
  std::vector<std::vector<float>> layer_hidden_;
  const float* output_rows_ = nullptr;  // the residual stream the last forward() left
};

// ---- loading ---------------------------------------------------------------------------------------

// Matrices that share an input, as one stack where the backend can (stack_weights, as qwen35).
WeightView Qwen3Stage::stacked(const std::vector<std::string>& names, const std::vector<WeightView*>& parts) const {
  return stack_weights(*be_, *gguf_, names, parts);
}

// One layer's tensors, GGUF names as llama.cpp's converter writes them for Qwen3.
LayerWeights Qwen3Stage::bind_layer(uint32_t il) {
  const std::string p = "blk." + std::to_string(il) + ".";
  LayerWeights lw;
  lw.attn_norm = f(p + "attn_norm.weight");
  lw.ffn_norm = f(p + "ffn_norm.weight");
  lw.attn.o = w(p + "attn_output.weight");
  lw.attn.q_norm = f(p + "attn_q_norm.weight");
  lw.attn.k_norm = f(p + "attn_k_norm.weight");
  lw.attn.qkv =
      stacked({p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, {&lw.attn.q, &lw.attn.k, &lw.attn.v});
  lw.ffn.gate_up = stacked({p + "ffn_gate.weight", p + "ffn_up.weight"}, {&lw.ffn.gate, &lw.ffn.up});
  lw.ffn.down = w(p + "ffn_down.weight");
  return lw;
}

void Qwen3Stage::bind_weights() {
  if (range_.first_layer >= range_.last_layer || range_.last_layer > cfg_.n_layer) {
    throw ConfigError("invalid layer range [" + std::to_string(range_.first_layer) + ", " +
                      std::to_string(range_.last_layer) + ") for a model with " + std::to_string(cfg_.n_layer) +
                      " layers");
  }
  if (cfg_.n_nextn != 0 || cfg_.attn_output_gate) throw ConfigError("qwen3 stage: the config is not a dense qwen3");
  if (is_first()) token_embd_ = w("token_embd.weight");
  for (uint32_t il = range_.first_layer; il < range_.last_layer; ++il) layers_.push_back(bind_layer(il));
  if (is_last()) bind_head();
}

// The last stage's final norm and head; only the matrices the head reads reach the device.
void Qwen3Stage::bind_head() {
  output_norm_ = f("output_norm.weight");
  switch (opt_.head) {
    case OutputHead::kLanguageModel:
      head_ = cfg_.tied_embeddings ? w("token_embd.weight") : w("output.weight");
      break;
    case OutputHead::kEmbedding:
      break;
    case OutputHead::kRankClassifier:
      head_ = cfg_.has_cls_head ? w("cls.output.weight") : label_rows_head();
      break;
  }
}

// The rank head without cls.output: row i is the LM-head row of label i's token (a reranker
// scores "yes" / "no" by those two logits). Rows are byte ranges in every GGUF type, so the copy
// keeps the type and its bits.
WeightView Qwen3Stage::label_rows_head() {
  const GgufTensor& lm = gguf_->tensor(cfg_.tied_embeddings ? "token_embd.weight" : "output.weight");
  const size_t row_bytes = lm.row_bytes(), n = cfg_.classifier_label_tokens.size();
  label_bytes_.resize(n * row_bytes);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<size_t>(cfg_.classifier_label_tokens[i]);  // >= 0: output_head_problem checked
    std::memcpy(label_bytes_.data() + i * row_bytes, lm.data + id * row_bytes, row_bytes);
  }
  label_tensor_ = lm;
  label_tensor_.name = "rank head (label rows of " + lm.name + ")";
  label_tensor_.n_dims = 2;
  label_tensor_.ne = {lm.ne[0], n, 1, 1};
  label_tensor_.nbytes = label_bytes_.size();
  label_tensor_.data = label_bytes_.data();
  return be_->weight(label_tensor_);
}

// ---- layers ----------------------------------------------------------------------------------------

StepContext Qwen3Stage::context(const std::vector<SeqSpan>& spans, size_t T) {
  return StepContext{*be_,  ws_, *cache_,           block_scratch_,  cfg_,
                     spans, T,   positions_.data(), kv_rows_.data(), opt_.tap ? &opt_.tap : nullptr};
}

// One decoder block. Each residual add runs in one pass with the norm after it
// (Backend::add_rms_norm); `normed`: the previous block already left RMSNorm(h; attn_norm) in
// kNorm; `next_norm`: the next block's attn_norm (null for the stage's last block).
void Qwen3Stage::run_layer(const StepContext& ctx, const LayerWeights& lw, uint32_t layer, size_t kv_pool, bool normed,
                           const float* next_norm) {
  const size_t D = cfg_.n_embd, T = ctx.T;
  float* h = ws_.get(Slot::kHidden, T * D);
  float* b = ws_.get(Slot::kNorm, T * D);
  if (!normed) be_->rms_norm(h, D, lw.attn_norm, cfg_.rms_eps, T, D, b, D);
  const float* mixed = gated_attention(ctx, lw.attn, kv_pool, b, layer);
  be_->add_rms_norm(h, mixed, lw.ffn_norm, cfg_.rms_eps, T, D, b);
  const float* down = swiglu_ffn(ctx, lw.ffn, b, layer);
  if (next_norm != nullptr) {
    be_->add_rms_norm(h, down, next_norm, cfg_.rms_eps, T, D, b);
  } else {
    be_->add_inplace(h, down, T * D);
  }
  tap(ctx, layer, "out", h, D);
}

// ---- step ------------------------------------------------------------------------------------------

// RMSNorm(rows; output_norm) of n device rows, downloaded into `host` ([n, n_embd]).
void Qwen3Stage::normed_rows(const float* rows, size_t n, std::vector<float>* host) {
  const size_t D = cfg_.n_embd;
  float* normed = ws_.get(Slot::kHeadNorm, n * D);
  be_->rms_norm(rows, D, output_norm_, cfg_.rms_eps, n, D, normed, D);
  host->resize(n * D);
  be_->download(host->data(), normed, n * D);
}

void Qwen3Stage::forward(const StepInput& in, StepOutput* out) {
  check_step(in, StepLimits{cfg_.n_vocab, opt_.max_context, 0, "qwen3"}, *cache_);
  const std::vector<SeqSpan> spans = lay_out_step(in, *cache_, &positions_, &kv_rows_);
  const size_t D = cfg_.n_embd;
  const size_t T = spans.back().offset + spans.back().n_tokens;
  float* x = input_rows(T);  // a later stage's input is already there (StageModel::input_rows)
  if (is_first()) {
    std::vector<int32_t> ids;
    for (const SeqStep& s : in.seqs) ids.insert(ids.end(), s.token_ids.begin(), s.token_ids.end());
    be_->embed_rows(token_embd_, ids.data(), T, x);
  }
  layer_hidden_.clear();
  const StepContext ctx = context(spans, T);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const float* next_norm = l + 1 < layers_.size() ? layers_[l + 1].attn_norm : nullptr;
    run_layer(ctx, layers_[l], range_.first_layer + static_cast<uint32_t>(l), l, l > 0, next_norm);
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
  run_head(in, x, T, rows, out);
}

// The last stage's head over the logit rows `rows` of the residual stream x [T, D] (device).
void Qwen3Stage::run_head(const StepInput& in, const float* x, size_t T, const std::vector<uint32_t>& rows,
                          StepOutput* out) {
  const size_t D = cfg_.n_embd;
  if (in.all_final_hidden) normed_rows(x, T, &out->final_hidden);  // every row, as qwen35 gives them
  if (rows.empty()) return;
  float* picked = ws_.get(Slot::kPicked, rows.size() * D);
  be_->gather_rows(x, rows.data(), rows.size(), D, picked);
  std::vector<float>* normed_out = in.all_final_hidden ? nullptr : &out->final_hidden;
  const LmHeadWeights head{output_norm_, head_, cfg_.rms_eps};
  switch (opt_.head) {
    case OutputHead::kEmbedding:
      if (normed_out != nullptr) normed_rows(picked, rows.size(), normed_out);
      return;
    case OutputHead::kRankClassifier:  // a few labels: full rows, nothing to digest, edit or mask
      lm_head(*be_, ws_, head, picked, rows.size(), D, nullptr, nullptr,
              LmHeadOutput{&out->logits, normed_out, nullptr});
      return;
    case OutputHead::kLanguageModel: {
      const bool digest = in.digest_rows.size() == rows.size();  // else (absent or inconsistent): full logits
      lm_head(*be_, ws_, head, picked, rows.size(), D, digest ? in.digest_rows.data() : nullptr, &in.logit_edits,
              LmHeadOutput{&out->logits, normed_out, digest ? &out->digests : nullptr}, &in.token_masks);
      if (!out->digests.empty()) out->digest_n_vocab = static_cast<uint32_t>(head_.rows);
      return;
    }
  }
}

}  // namespace

std::unique_ptr<StageModel> load_qwen3_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                             StageRange range, const StageOptions& options,
                                             std::unique_ptr<Backend> backend) {
  if (config.arch != "qwen3") throw ConfigError("qwen3 stage: architecture '" + config.arch + "' is not qwen3");
  if (const std::string why = output_head_problem(config, options.head); !why.empty()) {
    throw ConfigError("qwen3 stage: " + why);
  }
  return std::make_unique<Qwen3Stage>(std::move(gguf), config, range, options, std::move(backend));
}

}  // namespace ds
