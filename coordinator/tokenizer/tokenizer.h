// Byte-level BPE tokenizer for Qwen2/Qwen3/Qwen3.5 GGUF vocabularies (tokenizer.ggml.model =
// "gpt2", pre = "qwen2" | "qwen35"); qwen35-model-spec.md §8. Immutable after construction;
// encode/decode are safe to call from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/prompt_text.h"
#include "coordinator/tokenizer/pretokenizer.h"
#include "coordinator/tokenizer/vocab.h"

namespace ds {

class GgufFile;

struct TokenizerOptions {
  // Overrides tokenizer.ggml.pre (tests run the qwen35 vectors on a qwen2 vocabulary).
  std::optional<PreTokenizerKind> pre_tokenizer;
  // NFC-normalise raw text before pre-tokenization. Default: on for "qwen2" (HF's Qwen2/Qwen3
  // tokenizer.json has an NFC normalizer), off for "qwen35" (its reference vectors keep
  // decomposed marks). llama.cpp never normalises.
  std::optional<bool> nfc;
  // Pieces kept in the memoised BPE cache; 0 disables it.
  size_t cache_capacity = 1 << 16;
};

// A budgeted encode found more than its `max_tokens` tokens. It stops as soon as that is
// certain: before any work when the text is longer than max_tokens of the vocabulary's longest
// tokens, before a piece whose bytes alone would overrun the budget, or when the pieces of a
// fragment outnumber what is left (each piece is at least one token). So the work a request can
// cause is bounded by its budget, not by its size.
class TokenBudgetExceeded : public std::length_error {
 public:
  explicit TokenBudgetExceeded(size_t at_least)
      : std::length_error("the text has at least " + std::to_string(at_least) + " tokens"), at_least_(at_least) {}
  size_t at_least() const { return at_least_; }

 private:
  size_t at_least_;
};

class Tokenizer {
 public:
  static constexpr size_t kNoBudget = std::numeric_limits<size_t>::max();

  // Reads the tokenizer.ggml.* keys. Throws ds::ConfigError naming the key and value for an
  // unsupported model or pre-tokenizer, or inconsistent tables (and ds::FormatError from the
  // GGUF reader for missing / mistyped keys).
  explicit Tokenizer(const GgufFile& gguf, const TokenizerOptions& options = {});
  static Tokenizer from_file(const std::string& gguf_path, const TokenizerOptions& options = {});
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // ---- encoding (never adds BOS/EOS; callers consult add_bos()/add_eos()) ----------------
  // USER_DEFINED tokens always match; CONTROL tokens only when `parse_control`.
  // Budgeted (max_tokens < kNoBudget): throws TokenBudgetExceeded rather than produce more.
  std::vector<int32_t> encode(std::string_view text, bool parse_control, size_t max_tokens = kNoBudget) const;
  // Chat prompts: CONTROL tokens match only where they lie entirely outside
  // prompt.untrusted; USER_DEFINED tokens match everywhere.
  std::vector<int32_t> encode(const PromptText& prompt, size_t max_tokens = kNoBudget) const;
  // Bytes of the longest token text (added tokens included).
  size_t max_token_bytes() const;
  // The fewest tokens a text of `bytes` bytes can encode to: ceil(bytes / max_token_bytes()),
  // a third of that with NFC (composition shortens UTF-8 at most 3x: Hangul L+V+T jamo, 9
  // bytes, become one 3-byte syllable). A cheap bound to refuse oversized text before any work.
  size_t min_tokens(size_t bytes) const;

  // ---- decoding ------------------------------------------------------------------------
  // Concatenated token bytes as valid UTF-8 (invalid sequences become U+FFFD). CONTROL,
  // UNKNOWN and UNUSED tokens appear (as their text) only when `render_control`.
  // Throws std::out_of_range for an id outside [0, n_vocab()).
  std::string decode(const std::vector<int32_t>& ids, bool render_control) const;
  // Raw bytes one token contributes to decoded text (may be partial UTF-8; empty for a
  // hidden control token when !render_control). Throws std::out_of_range on a bad id.
  std::string_view token_piece(int32_t id, bool render_control) const;

  // ---- vocabulary ----------------------------------------------------------------------
  int32_t n_vocab() const;
  // Vocabulary text (byte-level-mapped form, e.g. "Ġworld"). Throws std::out_of_range.
  std::string_view token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;  // throws std::out_of_range
  std::optional<int32_t> find_token(std::string_view text) const;
  bool is_control(int32_t id) const;  // CONTROL type; false for out-of-range ids
  // End-of-generation: eos, <|im_end|>, <|endoftext|>, <|fim_pad|>, <|repo_name|>,
  // <|file_sep|> (those present). False for out-of-range ids.
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const;  // sorted

  int32_t eos_id() const;  // -1 when the file names none
  int32_t pad_id() const;  // -1 when the file names none
  int32_t bos_id() const;  // -1 when the file names none
  bool add_bos() const;    // tokenizer.ggml.add_bos_token (default false)
  bool add_eos() const;    // tokenizer.ggml.add_eos_token (default false)
  PreTokenizerKind pre_tokenizer() const;
  bool nfc() const;  // whether encode() NFC-normalises raw text

  void clear_cache() const;  // drops memoised pieces (benchmarks measure cold encoding)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds
