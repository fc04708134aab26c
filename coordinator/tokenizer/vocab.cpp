#include "coordinator/tokenizer/vocab.h"

#include <limits>
#include <string>

#include "common/error.h"
#include "common/gguf.h"
#include "coordinator/tokenizer/byte_level.h"

namespace ds::tok {

namespace {

constexpr const char* kTokensKey = "tokenizer.ggml.tokens";
constexpr const char* kTypesKey = "tokenizer.ggml.token_type";

std::vector<TokenType> read_types(const GgufFile& gguf, size_t n) {
  std::vector<TokenType> types(n, TokenType::NORMAL);
  if (!gguf.has(kTypesKey)) return types;
  const std::vector<int64_t> raw = gguf.get_int_array(kTypesKey);
  if (raw.size() != n) {
    throw ConfigError(std::string(kTypesKey) + " has " + std::to_string(raw.size()) + " entries but " + kTokensKey +
                      " has " + std::to_string(n));
  }
  for (size_t i = 0; i < n; ++i) types[i] = static_cast<TokenType>(raw[i]);
  return types;
}

bool is_byte_level_type(TokenType t) {
  return t == TokenType::NORMAL || t == TokenType::BYTE || t == TokenType::UNKNOWN || t == TokenType::UNDEFINED;
}

void push(std::vector<char>& arena, std::vector<uint32_t>& off, std::string_view s) {
  arena.insert(arena.end(), s.begin(), s.end());
  off.push_back(static_cast<uint32_t>(arena.size()));
}

}  // namespace

Vocab::Vocab(const GgufFile& gguf) {
  const std::vector<std::string_view>& tokens = gguf.get_string_array(kTokensKey);
  if (tokens.empty()) throw ConfigError(std::string(kTokensKey) + " is empty");
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw ConfigError(std::string(kTokensKey) + " is too large");
  }
  types_ = read_types(gguf, tokens.size());

  size_t total = 0;
  for (std::string_view t : tokens) total += t.size();
  if (total > std::numeric_limits<uint32_t>::max() / 2) throw ConfigError(std::string(kTokensKey) + " is too large");
  text_arena_.reserve(total);
  bytes_arena_.reserve(total);
  text_off_.reserve(tokens.size() + 1);
  bytes_off_.reserve(tokens.size() + 1);
  text_off_.push_back(0);
  bytes_off_.push_back(0);

  std::string raw;
  for (size_t i = 0; i < tokens.size(); ++i) {
    push(text_arena_, text_off_, tokens[i]);
    raw.clear();
    // A NORMAL text that is not pure byte-level (should not happen) is kept literally.
    if (!is_byte_level_type(types_[i]) || !unmap_bytes(tokens[i], raw)) raw.assign(tokens[i]);
    push(bytes_arena_, bytes_off_, raw);
  }

  index_.reserve(tokens.size());
  for (int32_t id = 0; id < size(); ++id) index_.emplace(text(id), id);  // emplace keeps the first
}

std::optional<int32_t> Vocab::find(std::string_view t) const {
  const auto it = index_.find(t);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ds::tok
