#include "coordinator/tokenizer/tokenizer.h"

#include <algorithm>
#include <span>
#include <stdexcept>

#include "common/error.h"
#include "common/gguf.h"
#include "common/utf8.h"
#include "coordinator/tokenizer/bpe.h"
#include "coordinator/tokenizer/nfc.h"
#include "coordinator/tokenizer/piece_cache.h"
#include "coordinator/tokenizer/special_tokens.h"

namespace ds {

namespace {

constexpr const char* kModelKey = "tokenizer.ggml.model";
constexpr const char* kPreKey = "tokenizer.ggml.pre";
constexpr const char* kMergesKey = "tokenizer.ggml.merges";

// Token texts that end generation besides eos (llama.cpp's EOG heuristics, spec §8.2).
constexpr const char* kEogTexts[] = {"<|im_end|>", "<|endoftext|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"};

void check_model(const GgufFile& gguf) {
  const std::string model = gguf.get_string(kModelKey);
  if (model != "gpt2") {
    throw ConfigError(std::string(kModelKey) + " = '" + model + "' is not supported (expected 'gpt2', byte-level BPE)");
  }
}

PreTokenizerKind pick_pre_tokenizer(const GgufFile& gguf, const TokenizerOptions& options) {
  if (options.pre_tokenizer) return *options.pre_tokenizer;
  if (!gguf.has(kPreKey)) throw ConfigError(std::string(kPreKey) + " is missing (expected 'qwen2' or 'qwen35')");
  const std::string pre = gguf.get_string(kPreKey);
  const auto kind = pre_tokenizer_from_name(pre);
  if (!kind) {
    throw ConfigError(std::string(kPreKey) + " = '" + pre + "' is not supported (expected 'qwen2' or 'qwen35')");
  }
  return *kind;
}

// An optional token-id key: -1 when absent, ConfigError when outside the vocabulary.
int32_t optional_id(const GgufFile& gguf, const char* key, int32_t n_vocab) {
  if (!gguf.has(key)) return -1;
  const uint32_t id = gguf.get_u32(key);
  if (id >= static_cast<uint32_t>(n_vocab)) {
    throw ConfigError(std::string(key) + " = " + std::to_string(id) + " is outside the vocabulary (" +
                      std::to_string(n_vocab) + " tokens)");
  }
  return static_cast<int32_t>(id);
}

// Sorted, clamped, merged copy of caller ranges: the overlap test relies on that order, and a
// malformed PromptText must not open a hole in the injection defence.
std::vector<ByteRange> normalize_ranges(const std::vector<ByteRange>& ranges, size_t text_size) {
  std::vector<ByteRange> r;
  for (ByteRange b : ranges) {
    b.end = std::min(b.end, text_size);
    if (b.begin < b.end) r.push_back(b);
  }
  std::sort(r.begin(), r.end(), [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  std::vector<ByteRange> merged;
  for (const ByteRange& b : r) {
    if (!merged.empty() && b.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, b.end);
    } else {
      merged.push_back(b);
    }
  }
  return merged;
}

bool hidden_unless_rendered(TokenType t) {
  return t == TokenType::CONTROL || t == TokenType::UNKNOWN || t == TokenType::UNUSED;
}

}  // namespace

struct Tokenizer::Impl {
  tok::Vocab vocab;
  tok::BpeMerges bpe;
  tok::PreTokenizer pre;
  tok::SpecialTokens specials;
  std::unique_ptr<tok::PieceCache> cache;
  bool nfc = false;
  int32_t eos = -1;
  int32_t pad = -1;
  int32_t bos = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::vector<int32_t> eog;
  size_t max_token_bytes = 1;

  Impl(const GgufFile& gguf, const TokenizerOptions& options, PreTokenizerKind kind)
      : vocab(gguf),
        bpe(vocab, gguf.get_string_array(kMergesKey)),
        pre(kind),
        specials(vocab),
        cache(std::make_unique<tok::PieceCache>(options.cache_capacity)),
        nfc(options.nfc.value_or(kind == PreTokenizerKind::QWEN2)) {
    eos = optional_id(gguf, "tokenizer.ggml.eos_token_id", vocab.size());
    pad = optional_id(gguf, "tokenizer.ggml.padding_token_id", vocab.size());
    bos = optional_id(gguf, "tokenizer.ggml.bos_token_id", vocab.size());
    add_bos = gguf.get_bool_or("tokenizer.ggml.add_bos_token", false);
    add_eos = gguf.get_bool_or("tokenizer.ggml.add_eos_token", false);
    if (eos >= 0) eog.push_back(eos);
    for (const char* t : kEogTexts) {
      if (const auto id = vocab.find(t)) eog.push_back(*id);
    }
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
    for (int32_t id = 0; id < vocab.size(); ++id) max_token_bytes = std::max(max_token_bytes, vocab.bytes(id).size());
  }

  // At least this many tokens in `bytes` bytes of text (before NFC: see Tokenizer::min_tokens).
  size_t min_tokens(size_t bytes, bool before_nfc = false) const {
    const size_t per_token = max_token_bytes * (before_nfc && nfc ? 3 : 1);
    return (bytes + per_token - 1) / per_token;
  }

  void check_id(int32_t id) const {
    if (id < 0 || id >= vocab.size()) {
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(vocab.size()) + ")");
    }
  }

  // Pre-tokenizes one raw fragment and BPE-encodes each piece (memoised), within `max_tokens`.
  void encode_raw(std::string_view text, std::vector<tok::Span>& spans, tok::BpeScratch& scratch,
                  std::vector<int32_t>& out, size_t max_tokens) const {
    spans.clear();
    const size_t left = max_tokens - out.size();
    if (!pre.split(text, spans, left)) throw TokenBudgetExceeded(out.size() + spans.size());
    for (const tok::Span& s : spans) {
      const std::string_view piece = text.substr(s.begin, s.end - s.begin);
      const bool cacheable = piece.size() <= tok::PieceCache::kMaxPieceBytes;
      if (cacheable && cache->lookup(piece, out)) continue;
      // A long piece is the expensive case (BPE is O(n log n) in its bytes): refuse it before
      // the work when its bytes alone need more tokens than the budget has left.
      if (max_tokens != Tokenizer::kNoBudget && out.size() + min_tokens(piece.size()) > max_tokens) {
        throw TokenBudgetExceeded(out.size() + min_tokens(piece.size()));
      }
      const size_t before = out.size();
      bpe.encode_piece(piece, scratch, out);
      if (cacheable) cache->insert(piece, out.data() + before, out.size() - before);
    }
    if (out.size() > max_tokens) throw TokenBudgetExceeded(out.size());
  }

  std::vector<int32_t> encode(std::string_view text, bool parse_control, std::span<const ByteRange> untrusted,
                              size_t max_tokens) const {
    if (max_tokens != Tokenizer::kNoBudget && min_tokens(text.size(), true) > max_tokens) {
      throw TokenBudgetExceeded(min_tokens(text.size(), true));
    }
    std::vector<tok::Fragment> fragments;
    specials.split(text, parse_control, untrusted, fragments);
    std::vector<int32_t> out;
    out.reserve(std::min(text.size() / 3, max_tokens) + 4);
    std::vector<tok::Span> spans;
    tok::BpeScratch scratch;
    std::string normalized;
    // Each raw fragment is encoded whole, even where it spans trusted and untrusted bytes:
    // splitting at range boundaries would change ids relative to the reference tokenizer.
    for (const tok::Fragment& f : fragments) {
      if (f.token >= 0) {
        out.push_back(f.token);
        if (out.size() > max_tokens) throw TokenBudgetExceeded(out.size());
      } else {
        const std::string_view raw = text.substr(f.begin, f.end - f.begin);
        // Normalised after the added-token split, as HF does (added tokens match raw text).
        const bool changed = nfc && tok::nfc_normalize(raw, normalized);
        encode_raw(changed ? std::string_view(normalized) : raw, spans, scratch, out, max_tokens);
      }
    }
    return out;
  }

  std::string_view piece(int32_t id, bool render_control) const {
    check_id(id);
    if (!render_control && hidden_unless_rendered(vocab.type(id))) return {};
    return vocab.bytes(id);
  }
};

Tokenizer::Tokenizer(const GgufFile& gguf, const TokenizerOptions& options) {
  check_model(gguf);
  const PreTokenizerKind kind = pick_pre_tokenizer(gguf, options);  // fail before the big tables
  impl_ = std::make_unique<Impl>(gguf, options, kind);
}

Tokenizer Tokenizer::from_file(const std::string& gguf_path, const TokenizerOptions& options) {
  return Tokenizer(GgufFile::open(gguf_path), options);
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_control, size_t max_tokens) const {
  return impl_->encode(text, parse_control, {}, max_tokens);
}

std::vector<int32_t> Tokenizer::encode(const PromptText& prompt, size_t max_tokens) const {
  const std::vector<ByteRange> untrusted = normalize_ranges(prompt.untrusted, prompt.text.size());
  return impl_->encode(prompt.text, true, untrusted, max_tokens);
}

size_t Tokenizer::max_token_bytes() const {
  return impl_->max_token_bytes;
}
size_t Tokenizer::min_tokens(size_t bytes) const {
  return impl_->min_tokens(bytes, true);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_control) const {
  std::string raw;
  for (int32_t id : ids) raw += impl_->piece(id, render_control);
  std::string out;
  out.reserve(raw.size());
  utf8::append_sanitized(raw, out, true);
  return out;
}

std::string_view Tokenizer::token_piece(int32_t id, bool render_control) const {
  return impl_->piece(id, render_control);
}

int32_t Tokenizer::n_vocab() const {
  return impl_->vocab.size();
}

std::string_view Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return impl_->vocab.text(id);
}

TokenType Tokenizer::token_type(int32_t id) const {
  impl_->check_id(id);
  return impl_->vocab.type(id);
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  return impl_->vocab.find(text);
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < impl_->vocab.size() && impl_->vocab.type(id) == TokenType::CONTROL;
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}

const std::vector<int32_t>& Tokenizer::eog_ids() const {
  return impl_->eog;
}
int32_t Tokenizer::eos_id() const {
  return impl_->eos;
}
int32_t Tokenizer::pad_id() const {
  return impl_->pad;
}
int32_t Tokenizer::bos_id() const {
  return impl_->bos;
}
bool Tokenizer::add_bos() const {
  return impl_->add_bos;
}
bool Tokenizer::add_eos() const {
  return impl_->add_eos;
}
PreTokenizerKind Tokenizer::pre_tokenizer() const {
  return impl_->pre.kind();
}
bool Tokenizer::nfc() const {
  return impl_->nfc;
}
void Tokenizer::clear_cache() const {
  impl_->cache->clear();
}

}  // namespace ds
