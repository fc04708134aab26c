// The independent reference outputs of the tiny Qwen3 embedding and reranker fixtures
// (tests/data/reference/qwen3_embed_rerank.json, the qwen3_embed and qwen3_rerank entries of the
// shared fixtures' reference-more manifest, computed by HF transformers in float32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::test {

struct Qwen3EmbedCase {
  std::string text;
  std::vector<int32_t> ids;            // literal text tokens + <|endoftext|>
  std::vector<float> embedding;        // last token's final-normed hidden, L2-normalised [64]
  std::vector<float> embedding_dim32;  // its first 32 values (unnormalised), re-normalised
};

struct Qwen3RerankCase {
  std::string query, document;
  std::vector<int32_t> ids;  // prompt prefix + "<Instruct>: ...<Query>: ...<Document>: ..." + suffix
  double yes_logit = 0, no_logit = 0;
  double score = 0;  // softmax([yes, no])[0] = sigmoid(yes - no)
};

struct Qwen3RerankFixture {
  int32_t yes_id = 0, no_id = 0;
  std::vector<Qwen3RerankCase> cases;
};

std::string qwen3_embed_model_path();
std::string qwen3_rerank_model_path();
std::vector<Qwen3EmbedCase> load_qwen3_embed_cases();
Qwen3RerankFixture load_qwen3_rerank_fixture();

}  // namespace ds::test
