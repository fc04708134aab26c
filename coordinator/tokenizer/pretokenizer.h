// Regex pre-tokenizers (qwen35-model-spec.md §8.3 step 2), run by PCRE2 in UTF + UCP mode
// with the JIT. Text between regex matches (only possible around invalid UTF-8, which PCRE2
// never matches) is kept as its own piece, so the pieces always cover the whole input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace ds {

enum class PreTokenizerKind {
  QWEN2,   // Qwen2 / Qwen3 (incl. Qwen3-Embedding, Qwen3-Reranker)
  QWEN35,  // Qwen3.5 / Qwen3.6: like QWEN2, but combining marks (\p{M}) count as letters
};

// Name as stored in tokenizer.ggml.pre ("qwen2", "qwen35").
const char* pre_tokenizer_name(PreTokenizerKind kind);
std::optional<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name);

namespace tok {

struct Span {
  size_t begin = 0;  // byte offsets into the split text, [begin, end)
  size_t end = 0;
};

class PreTokenizer {
 public:
  explicit PreTokenizer(PreTokenizerKind kind);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  PreTokenizerKind kind() const { return kind_; }
  bool jit() const;
  // Appends the pieces of `text` to `out` in order; together they cover every byte.
  // Thread-safe (match buffers are per thread). Throws std::runtime_error on a PCRE2 error.
  // Stops early (returning false) once `out` holds more than `max_spans` spans.
  bool split(std::string_view text, std::vector<Span>& out, size_t max_spans = SIZE_MAX) const;

 private:
  struct Impl;
  PreTokenizerKind kind_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tok
}  // namespace ds
