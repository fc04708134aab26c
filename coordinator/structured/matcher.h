// One Matcher per sequence: the pushdown automaton's configuration (a set of heads, each a
// grammar state plus a stack of return states in a shared frame pool), the history of
// accepted tokens for rollback, and token-mask computation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/structured/grammar.h"
#include "coordinator/structured/token_trie.h"

namespace ds::structured {

struct Frame {
  int32_t parent;  // -1: bottom
  int32_t ret;     // global state to continue in after the callee returns
  int32_t depth;
};

struct Head {
  int32_t g;
  int32_t stack;  // frame index, -1 = empty
  bool operator==(const Head&) const = default;
};

class Matcher {
 public:
  // Deepest nesting of rule calls (JSON nesting is about half of it); deeper input is refused.
  static constexpr int32_t kMaxDepth = 400;

  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab);

  // False (state unchanged) when the token is not allowed. An eog id is allowed exactly when
  // accepting(); after it nothing more is.
  bool accept_token(int32_t id);
  // Byte-level advance (tests, forced bytes); all or nothing.
  bool accept_bytes(std::string_view bytes);
  // n_vocab bits, bit set = allowed; writes ceil(n_vocab / 32) words.
  void fill_mask(uint32_t* bits) const;
  // Undo the last n accepted tokens (or accept_bytes calls).
  void rollback(size_t n);
  bool accepting() const { return accepting_ && !ended_; }
  bool terminated() const { return ended_ || (accepting_ && heads_.empty()); }
  // The bytes the grammar forces next (up to 64), if any.
  std::optional<std::string> forced_bytes() const;
  size_t n_accepted() const { return history_.size(); }

 private:
  struct Snapshot {
    std::vector<Head> heads;
    bool accepting, ended;
    size_t pool_size;
  };
  bool advance(std::string_view bytes, std::vector<Head>& heads, bool& accepting) const;
  void compute_mask(uint32_t* bits) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  mutable std::vector<Frame> pool_;
  std::vector<Head> heads_;
  bool accepting_ = false;
  bool ended_ = false;
  std::vector<Snapshot> history_;

  // Masks of recent configurations (inside a string the configuration repeats).
  struct Memo {
    std::vector<Head> heads;
    std::vector<uint32_t> bits;
  };
  mutable std::vector<Memo> memo_;
  mutable size_t memo_next_ = 0;
};

}  // namespace ds::structured
