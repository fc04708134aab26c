// The interface between a worker daemon (or an in-process driver) and the model: one
// pipeline stage = a contiguous slice [first_layer, last_layer) of the main stack. Stage 0 also
// owns the embedding; the last stage (last_layer == n_layer) owns the final norm, the LM head
// and the MTP block. The stage holds all per-sequence state of its layers in pooled memory:
// paged KV blocks for full-attention layers, conv + recurrent state slots for GDN layers, and
// snapshot buffers of those states (the hybrid prefix cache).
//
// Two ways to place sequences in that memory (CacheGeometry::managed()):
//  - managed (serving): the coordinator's scheduler decides each sequence's state slot, block
//    table and snapshots and sends them with every step (StepInput::cache);
//  - self-managed (tools, model tests): the stage places sequences itself by seq id and grows
//    its pools on demand; a step only names seq ids and positions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/image_patches.h"  // RgbImage
#include "common/image_span.h"     // ImageSpan
#include "common/logit_adjust.h"
#include "common/sampling.h"     // DigestRequest, LogitDigest
#include "common/stage_types.h"  // SeqCache, StageRange, CacheGeometry, OutputHead
#include "common/token_mask.h"

namespace ds {

class Backend;
class GgufFile;
struct ModelConfig;

// One sequence's part of a step. Tokens [start_pos, start_pos + n_tokens) are processed;
// positions before start_pos must already be in this stage's state for seq_id (start_pos == 0
// starts a fresh sequence and discards any old state of that id; on a managed stage a new
// placement, SeqCache::is_new, may also start later, from a snapshot and shared blocks).
struct SeqStep {
  uint64_t seq_id = 0;
  uint32_t start_pos = 0;
  std::vector<int32_t> token_ids;    // n_tokens ids (used by stage 0 for the embedding)
  std::vector<uint32_t> logit_rows;  // rows in [0, n_tokens) whose logits the last stage returns
  // Speculative decoding (both only ever set with --spec-k > 0):
  //  - n_draft: the last n_draft tokens are unverified drafts. The stage keeps the GDN state
  //    after each of the rows n_tokens-1-n_draft .. n_tokens-2 (capture j = after the j-th of
  //    them; at most StatePool::kMaxCaptures) so the next step can roll back.
  //  - rewind: the previous step of this sequence accepted fewer drafts than it computed; the
  //    stage drops every position >= start_pos (attention KV is simply overwritten) and restores
  //    the captured GDN state that holds exactly start_pos positions. The coordinator decides.
  uint32_t n_draft = 0;
  bool rewind = false;
  // Vision input: every image of the sequence whose first_pos < start_pos + n_tokens (the earlier
  // ones too: the M-RoPE positions of later text depend on them), in position order. Every stage
  // gets them (attention ropes by them); empty for a text-only sequence.
  std::vector<ImageSpan> images{};  // a default initializer: SeqStep{id, pos, ids, rows} stays warning-free
  uint32_t n_tokens() const { return static_cast<uint32_t>(token_ids.size()); }
};

// Grammar masks of a step's logit rows that may still be on their way when the step starts
// (StepPlan.masks_follow: the coordinator computes them while the step runs). get() waits for
// them the first time it is called, which the LM head does only once the device has the rest
// of the step queued; it throws what the fetch throws (a timeout, masks the coordinator gave up on).
class PendingTokenMasks {
 public:
  PendingTokenMasks() = default;
  PendingTokenMasks(TokenMasks ready) : masks_(std::move(ready)) {}  // NOLINT: a ready value converts
  explicit PendingTokenMasks(std::function<TokenMasks()> fetch) : fetch_(std::move(fetch)), fetched_(false) {}
  const TokenMasks& get() const {
    if (!fetched_) {
      fetched_ = true;
      masks_ = fetch_();
    }
    return masks_;
  }

 private:
  std::function<TokenMasks()> fetch_;
  mutable TokenMasks masks_;
  mutable bool fetched_ = true;
};

// The pixels of one image of a step (stage 0 only), already resized by the coordinator to the
// final size (sides multiples of patch * merge); `hash` is the ImageSpan::hash that names it.
struct StepImage {
  uint64_t hash = 0;
  RgbImage image;
};

struct StepInput {
  std::vector<SeqStep> seqs;  // token rows are concatenated in this order
  // Last stage: final_hidden for every token row, not only the logit rows (MTP catch-up).
  bool all_final_hidden = false;
  // Managed memory: one entry per seqs[i]. Empty on a self-managed stage.
  std::vector<SeqCache> cache;
  // Last stage, optional: one entry per logit row (seqs order, then row order). When given and
  // the backend can digest those rows on its device, forward() returns StepOutput::digests and
  // no logits (a decode step then downloads a digest, not the vocabulary); otherwise logits.
  std::vector<DigestRequest> digest_rows;
  // Last stage, optional: edits of the logit rows (LogitEdit::row indexes them in the order
  // above), applied on the device before they are digested or returned: biases, masks.
  std::vector<LogitEdit> logit_edits;
  // Last stage, optional: grammar masks of logit rows (TokenMasks::rows index them likewise),
  // applied after the edits.
  PendingTokenMasks token_masks;
  // Stage 0, vision input: the pixels of every image that has tokens among this step's rows
  // (SeqStep::images names them by hash). An image split over several steps (chunked prefill)
  // comes again in each; the stage encodes it once (ImageEmbedder's cache).
  std::vector<StepImage> images;
};

struct StepOutput {
  // Last stage: for every requested logit row (in seqs order, then row order):
  std::vector<float> logits;        // [n_rows, n_vocab]
  std::vector<float> final_hidden;  // [n_rows, n_embd], post output_norm (the MTP input);
                                    // [total_tokens, n_embd] with StepInput::all_final_hidden
  // Instead of logits, when StepInput::digest_rows was honoured: one digest per logit row, and
  // the vocabulary size they were taken over.
  std::vector<LogitDigest> digests;
  uint32_t digest_n_vocab = 0;
};

// Debugging: called with every named intermediate the blocks produce ("blk.3.attn_out",
// "blk.3.ffn_out", "blk.3.out", ...) as host rows [T, width], when StageOptions::tap is set.
// Bringing up an architecture against a reference compares these op by op.
using BlockTap = std::function<void(const std::string& name, const std::vector<float>& rows, size_t width)>;

struct StageOptions {
  int n_threads = 1;             // CPU backend worker threads
  uint32_t max_context = 0;      // 0: model context length
  bool keep_all_hidden = false;  // debugging: record per-layer residuals (tests compare them)
  CacheGeometry cache;           // memory layout (default: self-managed)
  // MTP drafts (forward_mtp_last) pick among ids [0, draft_vocab) only: the LM head's first rows.
  // 0 or the vocabulary size or more: every id. forward_mtp always gives the whole vocabulary.
  uint32_t draft_vocab = 0;
  BlockTap tap;  // debugging: named intermediates (slow: each is downloaded)
  // What the last stage returns for the logit rows (common/stage_types.h): kLanguageModel the
  // logits [n_rows, n_vocab] (or digests); kEmbedding no head at all, StepOutput::final_hidden
  // [n_rows, n_embd] (final-normed, not L2-normalised) and no logits or digests; kRankClassifier
  // logits [n_rows, n_labels] from the classifier head, no digests. Digest requests, logit edits
  // and grammar masks apply to kLanguageModel only. A model that cannot serve the head fails its
  // load with ConfigError (common/model_config.h: output_head_problem).
  OutputHead head = OutputHead::kLanguageModel;
  // Vision input: the mmproj GGUF (the vision tower). Stage 0 (first_layer == 0) then builds the
  // tower on its backend and embeds the images of a step; other stages ignore it. Without it,
  // a step with image pixels or image tokens to embed is refused (ConfigError).
  std::shared_ptr<const GgufFile> mmproj;
};

class StageModel {
 public:
  virtual ~StageModel() = default;
  virtual const StageRange& range() const = 0;
  virtual bool is_first() const = 0;
  virtual bool is_last() const = 0;
  // Runs the step. Throws std::exception (e.g. ds::ConfigError) on invalid input, leaving the
  // state of sequences not named in `in` untouched.
  virtual void forward(const StepInput& in, StepOutput* out) = 0;
  // The pipeline hand-off, on the stage's device (worker/daemon/stage_handoff.h moves the rows
  // between it and the host): forward() of a stage after the first reads its input rows
  // [total_tokens, n_embd] from the buffer input_rows(total_tokens) returned just before; a stage
  // before the last leaves its output rows in output_rows(), valid until the next forward().
  virtual Backend& backend() = 0;
  virtual float* input_rows(size_t n_tokens) = 0;
  virtual const float* output_rows() const = 0;
  // MTP draft rows (last stage only): row i = (final-normed hidden `hidden[i]`, token
  // `token_ids[i]`) at position start_pos + i of seq_id's MTP cache. Returns [n, n_vocab] logits.
  // The MTP cache uses the sequence's block table (its own pool); on a managed stage the table
  // must already cover the rows. start_pos may go back to any position the MTP cache holds
  // (rows after it are overwritten). `out_hidden` (optional): [n, n_embd] shared-head-normed
  // output, the hidden a chained draft step feeds back in.
  virtual void forward_mtp(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids,
                           const float* hidden, std::vector<float>* logits,
                           std::vector<float>* out_hidden = nullptr) = 0;
  // forward_mtp for drafting, which needs only the last row: its shared-head-normed hidden
  // (`last_hidden`, [n_embd]) and either its digest under `digest->rule` (when `digest` is given
  // and the backend digests on its device: *last_digest set, `last_logits` empty; a greedy
  // draft then downloads a few bytes, not the vocabulary) or its logits (`last_logits`,
  // [n_vocab]). Returns whether it digested. The default runs forward_mtp and keeps its last row.
  virtual bool forward_mtp_last(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids,
                                const float* hidden, const DigestRequest* digest, LogitDigest* last_digest,
                                std::vector<float>* last_logits, std::vector<float>* last_hidden);
  // Forgets a sequence. Managed: only its block table goes (the memory belongs to the pools and
  // the scheduler); self-managed: its slot and blocks return to the stage's free lists.
  virtual void drop_sequence(uint64_t seq_id) = 0;
  // Forgets every sequence and every snapshot (worker recovery).
  virtual void drop_all() = 0;
  // Residual stream after each layer of the last forward (only with keep_all_hidden).
  virtual const std::vector<std::vector<float>>& layer_hidden() const = 0;
};

// Inline so that every StageModel (test fakes included) gets it without another object file.
inline bool StageModel::forward_mtp_last(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids,
                                         const float* hidden, const DigestRequest* /*digest*/,
                                         LogitDigest* /*last_digest*/, std::vector<float>* last_logits,
                                         std::vector<float>* last_hidden) {
  std::vector<float> logits, normed;
  forward_mtp(seq_id, start_pos, token_ids, hidden, &logits, &normed);
  const size_t n = token_ids.size(), n_vocab = logits.size() / n, n_embd = normed.size() / n;
  last_logits->assign(logits.end() - static_cast<std::ptrdiff_t>(n_vocab), logits.end());
  last_hidden->assign(normed.end() - static_cast<std::ptrdiff_t>(n_embd), normed.end());
  return false;
}

class Backend;

// Loads one stage of the model on `backend` (weights resident on its device), with the
// architecture's loader (worker/models/registry.h); ConfigError for an architecture no model
// file implements.
std::unique_ptr<StageModel> load_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                       StageRange range, const StageOptions& options, std::unique_ptr<Backend> backend);

// Loads one stage on the CPU backend (weights used straight from the mmap).
std::unique_ptr<StageModel> load_cpu_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                           StageRange range, const StageOptions& options);

}  // namespace ds
