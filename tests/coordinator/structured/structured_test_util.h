// Helpers for the structured-output tests: small byte vocabularies, the real Qwen3.5
// tokenizer, and acceptance checks that also verify the mask against accept_token.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "coordinator/structured/grammar.h"
#include "coordinator/structured/json_schema_compiler.h"
#include "coordinator/structured/matcher.h"
#include "coordinator/structured/token_trie.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds::structured::test {

// Tokens 0..255 are the single bytes; then a few multi-byte tokens; the last is EOS.
std::shared_ptr<const TokenVocab> byte_vocab();
int32_t byte_vocab_eos();

const ds::Tokenizer& qwen_tokenizer();
std::shared_ptr<const TokenVocab> qwen_vocab();

std::shared_ptr<const Grammar> schema(const std::string& json, const GrammarOptions& opt = {});

// Feeds `text` one byte at a time through accept_bytes; true when every byte is accepted and
// the matcher ends accepting.
bool accepts_bytes(const std::shared_ptr<const Grammar>& g, const std::string& text);
// Same, tokenized with the vocabulary's tokenizer (Qwen) or one token per byte (byte vocab);
// before each token the mask bit must agree with accept_token (checked with EXPECT).
bool accepts_tokens(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenVocab>& v,
                    const std::vector<int32_t>& ids);
bool accepts_qwen(const std::shared_ptr<const Grammar>& g, const std::string& text);

inline bool bit(const std::vector<uint32_t>& m, int32_t id) {
  return (m[id >> 5] >> (id & 31)) & 1;
}

}  // namespace ds::structured::test
