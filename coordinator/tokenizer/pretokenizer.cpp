#include "coordinator/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>
#include <string>

#include "common/utf8.h"

namespace ds {

namespace {

// The regexes of qwen35-model-spec.md §8.3. Digits are single pieces (\p{N} without '+').
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// JIT stack bounds (bytes). Single-character repeats need no stack per character, so the
// default 32 KiB suffices for ordinary text; the larger maximum is headroom.
constexpr size_t kJitStackStart = 32 * 1024;
constexpr size_t kJitStackMax = 4 * 1024 * 1024;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match buffers: pcre2 match data and JIT stacks must not be shared between
// concurrent matches, and creating them per call would cost an mmap each time.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);  // only the whole match
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);

  MatchScratch() {
    if (!data || !context) throw std::bad_alloc();
    if (stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

const char* pre_tokenizer_name(PreTokenizerKind kind) {
  return kind == PreTokenizerKind::QWEN35 ? "qwen35" : "qwen2";
}

std::optional<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name) {
  if (name == "qwen2") return PreTokenizerKind::QWEN2;
  if (name == "qwen35") return PreTokenizerKind::QWEN35;
  return std::nullopt;
}

namespace tok {

struct PreTokenizer::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;

  explicit Impl(const char* pattern) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // MATCH_INVALID_UTF: invalid UTF-8 in user text is legal input (it just never matches),
    // and it lets the JIT skip the per-call whole-subject UTF check (which would be O(n^2)).
    const uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, opts, &err, &err_off, nullptr);
    if (!code) {
      throw std::logic_error("pre-tokenizer regex does not compile at " + std::to_string(err_off) + ": " +
                             pcre2_message(err));
    }
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Impl() { pcre2_code_free(code); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // One match from `start`; returns pcre2's rc. Falls back to the interpreter when the JIT
  // stack overflows.
  int match(std::string_view text, size_t start, MatchScratch& s) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    if (jit) {
      const int rc = pcre2_jit_match(code, subject, text.size(), start, 0, s.data, s.context);
      if (rc != PCRE2_ERROR_JIT_STACKLIMIT) return rc;
    }
    return pcre2_match(code, subject, text.size(), start, PCRE2_NO_JIT, s.data, s.context);
  }
};

PreTokenizer::PreTokenizer(PreTokenizerKind kind)
    : kind_(kind), impl_(std::make_unique<Impl>(kind == PreTokenizerKind::QWEN35 ? kQwen35Pattern : kQwen2Pattern)) {}
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

bool PreTokenizer::jit() const {
  return impl_->jit;
}

bool PreTokenizer::split(std::string_view text, std::vector<Span>& out, size_t max_spans) const {
  MatchScratch& s = scratch();
  size_t covered = 0;  // bytes already assigned to pieces
  size_t pos = 0;      // next match start
  while (pos < text.size()) {
    const int rc = impl_->match(text, pos, s);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw std::runtime_error("pre-tokenizer: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    const size_t b = ov[0];
    const size_t e = ov[1];
    if (e <= b) {  // empty match (not produced by these patterns): step over one character
      if (b >= text.size()) break;
      const auto* p = reinterpret_cast<const uint8_t*>(text.data());
      pos = b + utf8::step(p + b, text.size() - b).len;
      continue;
    }
    if (b > covered) out.push_back({covered, b});  // unmatched gap
    out.push_back({b, e});
    covered = pos = e;
    if (out.size() > max_spans) return false;
  }
  if (covered < text.size()) out.push_back({covered, text.size()});
  return out.size() <= max_spans;
}

}  // namespace tok
}  // namespace ds
