#include "coordinator/structured/matcher.h"

#include <cstring>

#include "coordinator/structured/mask.h"
#include "coordinator/structured/pda.h"

namespace ds::structured {

namespace {
constexpr size_t kMemoSlots = 8;
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  Pda pda(*grammar_, pool_);
  std::vector<Head> work{Head{grammar_->root_start(), -1}};
  pda.closure(work, heads_, accepting_);
}

bool Matcher::advance(std::string_view bytes, std::vector<Head>& heads, bool& accepting) const {
  Pda pda(*grammar_, pool_);
  std::vector<Head> nxt;
  for (char c : bytes) {
    if (!pda.step(heads, static_cast<uint8_t>(c), nxt, accepting)) return false;
    heads.swap(nxt);
  }
  return true;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (ended_) return false;
  const size_t mark = pool_.size();
  std::vector<Head> heads = heads_;
  bool acc = accepting_;
  if (bytes.empty() || !advance(bytes, heads, acc)) {
    pool_.resize(mark);
    return false;
  }
  history_.push_back(Snapshot{std::move(heads_), accepting_, ended_, mark});
  heads_ = std::move(heads);
  accepting_ = acc;
  return true;
}

bool Matcher::accept_token(int32_t id) {
  if (ended_ || id < 0 || id >= vocab_->n_vocab()) return false;
  if (vocab_->is_eog(id)) {
    if (!accepting_) return false;
    history_.push_back(Snapshot{heads_, accepting_, ended_, pool_.size()});
    ended_ = true;
    return true;
  }
  return accept_bytes(vocab_->token_bytes(id));
}

void Matcher::rollback(size_t n) {
  if (n > history_.size()) n = history_.size();
  if (n == 0) return;
  Snapshot& s = history_[history_.size() - n];
  heads_ = std::move(s.heads);
  accepting_ = s.accepting;
  ended_ = s.ended;
  // Frames past the snapshot may be reused by later pushes: memoised masks keyed on them die.
  pool_.resize(s.pool_size);
  memo_.clear();
  history_.resize(history_.size() - n);
}

void Matcher::compute_mask(uint32_t* bits) const {
  const size_t words = vocab_->n_words();
  std::memset(bits, 0, words * sizeof(uint32_t));
  for (const Head& h : heads_) {
    auto e = mask_entry(*grammar_, *vocab_, h.g);
    add_head_mask(*grammar_, *vocab_, pool_, h, *e, bits);
  }
}

void Matcher::fill_mask(uint32_t* bits) const {
  const size_t words = vocab_->n_words();
  if (ended_) {
    std::memset(bits, 0, words * sizeof(uint32_t));
    return;
  }
  const Memo* hit = nullptr;
  for (const Memo& m : memo_)
    if (m.heads == heads_) hit = &m;
  if (hit) {
    std::memcpy(bits, hit->bits.data(), words * sizeof(uint32_t));
  } else {
    compute_mask(bits);
    if (memo_.size() < kMemoSlots) {
      memo_.push_back(Memo{heads_, std::vector<uint32_t>(bits, bits + words)});
    } else {
      Memo& m = memo_[memo_next_++ % kMemoSlots];
      m.heads = heads_;
      m.bits.assign(bits, bits + words);
    }
  }
  if (accepting_)
    for (int32_t id : vocab_->eog_ids())
      if (id >= 0 && id < vocab_->n_vocab()) bits[id >> 5] |= uint32_t{1} << (id & 31);
}

std::optional<std::string> Matcher::forced_bytes() const {
  if (ended_ || accepting_) return std::nullopt;
  const size_t mark = pool_.size();
  std::vector<Head> heads = heads_, nxt, only;
  std::string out;
  Pda pda(*grammar_, pool_);
  while (out.size() < 64) {
    int n_ok = 0;
    uint8_t last = 0;
    bool acc_after = false;
    for (int b = 0; b < 256 && n_ok < 2; ++b) {
      bool acc = false;
      if (pda.step(heads, static_cast<uint8_t>(b), nxt, acc)) {
        ++n_ok;
        last = static_cast<uint8_t>(b);
        only = nxt;
        acc_after = acc;
      }
    }
    if (n_ok != 1) break;
    out.push_back(static_cast<char>(last));
    heads.swap(only);
    if (acc_after) break;
  }
  pool_.resize(mark);
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace ds::structured
