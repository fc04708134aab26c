// Shared helpers for the tokenizer tests: the fixture vocabulary (real Qwen2/Qwen3 tokens in
// tiny-qwen35-q8_0.gguf) and the llama.cpp-format test vectors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/tokenizer/tokenizer.h"

namespace ds::test {

// Loaded once per process; `kind` forces the pre-tokenizer.
const Tokenizer& fixture_tokenizer(PreTokenizerKind kind = PreTokenizerKind::QWEN2);

struct TokenizerCase {
  std::string text;
  std::vector<int32_t> ids;
};

// vectors-<name>.inp/.out (qwen35-model-spec.md §8.4).
std::vector<TokenizerCase> read_vocab_vectors(const std::string& name);
// tokenizer_cases.json: [{"text": ..., "ids": [...]}, ...].
std::vector<TokenizerCase> read_json_cases();

}  // namespace ds::test
