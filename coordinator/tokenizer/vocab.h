// Token table of a byte-level BPE vocabulary (tokenizer.ggml.tokens / token_type), copied out
// of the GGUF so the Tokenizer outlives the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ds {

class GgufFile;

// Values of tokenizer.ggml.token_type (qwen35-model-spec.md §8.1).
enum class TokenType : int32_t {
  UNDEFINED = 0,
  NORMAL = 1,
  UNKNOWN = 2,
  CONTROL = 3,
  USER_DEFINED = 4,
  UNUSED = 5,
  BYTE = 6,
};

namespace tok {

class Vocab {
 public:
  // Reads tokenizer.ggml.tokens and (optional, default NORMAL) tokenizer.ggml.token_type.
  // Throws ds::ConfigError on an empty or inconsistent table.
  explicit Vocab(const GgufFile& gguf);

  int32_t size() const { return static_cast<int32_t>(types_.size()); }
  // Accessors take an id in [0, size()); the caller checks.
  std::string_view text(int32_t id) const { return slice(text_arena_, text_off_, id); }
  // Bytes a token stands for: NORMAL/BYTE/UNKNOWN texts unmapped through the byte table,
  // other types (CONTROL, USER_DEFINED, UNUSED) their literal text.
  std::string_view bytes(int32_t id) const { return slice(bytes_arena_, bytes_off_, id); }
  TokenType type(int32_t id) const { return types_[static_cast<size_t>(id)]; }
  // First id whose text is `text`.
  std::optional<int32_t> find(std::string_view text) const;

 private:
  static std::string_view slice(const std::vector<char>& arena, const std::vector<uint32_t>& off, int32_t id) {
    const auto i = static_cast<size_t>(id);
    return {arena.data() + off[i], off[i + 1] - off[i]};
  }

  // Texts stored back to back; off[i]..off[i+1] is token i. std::vector keeps its buffer
  // on move, so the string_views in index_ stay valid when the Vocab moves.
  std::vector<char> text_arena_;
  std::vector<uint32_t> text_off_;
  std::vector<char> bytes_arena_;
  std::vector<uint32_t> bytes_off_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string_view, int32_t> index_;
};

}  // namespace tok
}  // namespace ds
