// The independent reference outputs of the tiny Qwen3.5 fixture (tests/data/reference,
// computed by HF transformers in float32): see shared fixtures README.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::test {

struct LogitsSummary {
  std::vector<std::vector<int32_t>> topk_ids;    // [T][16]
  std::vector<std::vector<float>> topk_logits;   // [T][16]
  std::vector<double> logsumexp;                 // [T]
  std::vector<int32_t> probe_ids;                // [64]
  std::vector<std::vector<float>> probe_logits;  // [T][64]
};

struct ReferencePrompt {
  std::string name;
  std::vector<int32_t> ids;
  LogitsSummary logits;
  std::vector<float> last_logits;      // [V]
  std::vector<float> hidden_states;    // [n_layers+1, T, D] (empty for long prompts)
  std::vector<float> final_normed;     // [T, D]
  std::vector<int32_t> greedy_tokens;  // 32 (empty when absent)
  std::vector<double> greedy_margins;
  bool has_mtp = false;
  LogitsSummary mtp_logits;            // rows t = 0..T-2
  std::vector<float> mtp_last_logits;  // [V]
};

// Loads prompt `name` of a fixture: "qwen35" ("chat_basic", "rand_200", "rand_1500";
// reference/manifest.json) or "qwen35moe" ("rand_64", "rand_700"; reference/qwen35moe.json, no
// last-logits file: last_logits stays empty; greedy_16 fills greedy_tokens).
ReferencePrompt load_reference_prompt(const std::string& name, const std::string& fixture = "qwen35");

}  // namespace ds::test
