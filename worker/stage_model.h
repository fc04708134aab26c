// The interface between a worker daemon (or an in-process driver) and the model: one
// pipeline stage = a contiguous slice [first_layer, last_layer) of the main stack. Stage 0 also
// owns the embedding; the last stage (last_layer == n_layer) owns the final norm, the LM head
// and the MTP block. The stage holds all per-sequence state of its layers (KV cache rows for
// full-attention layers, conv + recurrent state for GDN layers) keyed by sequence id.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ds {

class GgufFile;
struct ModelConfig;

// One sequence's part of a step. Tokens [start_pos, start_pos + n_tokens) are processed;
// positions before start_pos must already be in this stage's state for seq_id (start_pos == 0
// starts a fresh sequence and discards any old state of that id).
struct SeqStep {
  uint64_t seq_id = 0;
  uint32_t start_pos = 0;
  std::vector<int32_t> token_ids;     // n_tokens ids (used by stage 0 for the embedding)
  std::vector<uint32_t> logit_rows;   // rows in [0, n_tokens) whose logits the last stage returns
  uint32_t n_tokens() const { return static_cast<uint32_t>(token_ids.size()); }
};

struct StepInput {
  std::vector<SeqStep> seqs;       // token rows are concatenated in this order
  const float* hidden = nullptr;   // [total_tokens, n_embd] from the previous stage; nullptr on stage 0
};

struct StepOutput {
  // Non-last stage: residual stream after this stage's layers, [total_tokens, n_embd].
  std::vector<float> hidden;
  // Last stage: for every requested logit row (in seqs order, then row order):
  std::vector<float> logits;         // [n_rows, n_vocab]
  std::vector<float> final_hidden;   // [n_rows, n_embd], post output_norm (the MTP input)
};

struct StageRange {
  uint32_t first_layer = 0;
  uint32_t last_layer = 0;  // exclusive
};

struct StageOptions {
  int n_threads = 1;              // CPU backend worker threads
  uint32_t max_context = 0;       // 0: model context length
  bool keep_all_hidden = false;   // debugging: record per-layer residuals (tests compare them)
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
  // MTP draft rows (last stage only): row i = (final-normed hidden `hidden[i]`, token
  // `token_ids[i]`) at position start_pos + i of seq_id's MTP cache. Returns [n, n_vocab] logits.
  virtual void forward_mtp(uint64_t seq_id, uint32_t start_pos, const std::vector<int32_t>& token_ids,
                           const float* hidden, std::vector<float>* logits) = 0;
  virtual void drop_sequence(uint64_t seq_id) = 0;
  virtual void drop_all() = 0;
  // Residual stream after each layer of the last forward (only with keep_all_hidden).
  virtual const std::vector<std::vector<float>>& layer_hidden() const = 0;
};

class Backend;

// Loads one stage of a qwen35 model on `backend` (weights resident on its device).
std::unique_ptr<StageModel> load_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                       StageRange range, const StageOptions& options,
                                       std::unique_ptr<Backend> backend);

// Loads one stage of a qwen35 model on the CPU backend (weights used straight from the mmap).
std::unique_ptr<StageModel> load_cpu_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                           StageRange range, const StageOptions& options);

}  // namespace ds
