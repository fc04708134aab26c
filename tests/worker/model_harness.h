// Shared helpers for model tests: load the fixture as one in-process CPU stage and run prompts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/model_config.h"
#include "worker/stage_model.h"

namespace ds::test {

struct LoadedModel {
  std::shared_ptr<const GgufFile> gguf;
  ModelConfig config;
  std::unique_ptr<StageModel> stage;
};

// `cache`: the stage's memory layout (default self-managed, as tools use it).
LoadedModel load_fixture(bool keep_all_hidden = false, StageRange range = {0, 0}, CacheGeometry cache = {},
                         uint32_t draft_vocab = 0);

// Any fixture GGUF of tests/data (e.g. "tiny-qwen35moe-q8_0.gguf") as one in-process CPU stage.
LoadedModel load_data_model(const std::string& file, CacheGeometry cache = {});

// Runs `ids` as sequence `seq_id` from position 0 in chunks of `chunk` tokens (0: one step),
// returning the logits of `rows` ([rows.size(), V]), rows ascending, and optionally their
// final-normed hidden states.
std::vector<float> run_prompt(StageModel& m, uint64_t seq_id, const std::vector<int32_t>& ids,
                              const std::vector<uint32_t>& rows, size_t chunk = 0,
                              std::vector<float>* final_hidden = nullptr);

// The MTP block's input rows for `prompt` as the catch-up builds them: `prompt` runs as sequence
// `seq_id` from position 0 on `m`, then row i is the final-normed hidden of prompt row i - 1 (row 0
// zeros); [prompt.size(), n_embd].
std::vector<float> mtp_rows_for_prompt(StageModel& m, size_t n_embd, uint64_t seq_id,
                                       const std::vector<int32_t>& prompt);

// Greedy decoding: runs `prompt` as sequence `seq_id`, then n_tokens steps of one token each,
// every one the argmax of the previous logits; returns the n_tokens ids.
std::vector<int32_t> greedy_tokens(StageModel& m, size_t n_vocab, uint64_t seq_id, const std::vector<int32_t>& prompt,
                                   size_t n_tokens);

// All rows 0..n-1.
std::vector<uint32_t> all_rows(size_t n);

// Index of the largest value (lowest index on ties).
int32_t argmax(const float* x, size_t n);

}  // namespace ds::test
