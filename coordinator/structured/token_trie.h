// The vocabulary as byte strings, arranged once in a trie for mask computation.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ds {
class Tokenizer;
}

namespace ds::structured {

// A trie node in DFS order: the children of node i are i+1 .. end-1 (each child's subtree
// spans child .. nodes[child].end). 12 bytes; a walk is a forward scan with skips.
struct TrieNode {
  uint8_t byte;
  int32_t token;  // >= 0: the token ending here; -1: none; <= -2: several, dups[-token - 2]
  uint32_t end;
};

// What a grammar state allows, independently of the stack below it: `ids` / `bits` (sparse
// or dense) are tokens accepted for sure; `uroots` are trie nodes (-1 = root) after whose
// bytes the state's rule may return to its caller, so their subtrees are walked again with
// the real stack.
// With `rest`, the uroots are nodes of TokenVocab::rest_trie() (the slice tokens are in `bits`).
struct MaskEntry {
  std::vector<uint32_t> bits;
  std::vector<int32_t> ids;
  std::vector<int32_t> uroots;
  bool rest = false;
};

// A trie over a subset of the vocabulary (DFS order, see TrieNode).
struct Trie {
  std::vector<TrieNode> nodes;
  std::vector<uint32_t> parent;  // kNoParent for depth 1
  std::vector<std::vector<int32_t>> dup_lists;
  size_t max_len = 0;

  static constexpr uint32_t kNoParent = 0xffffffffu;
  const std::vector<int32_t>& dups(int32_t token_field) const { return dup_lists[-token_field - 2]; }
  // Bytes from the trie root to `node` inclusive.
  std::string prefix(int32_t node) const;
};

// The string slice (llguidance's "slicer"): byte strings that are a run of characters JSON
// allows raw inside a string (U+0020.. except '"' and '\', well-formed UTF-8), possibly ending
// inside a character. slice_next is its DFA (state 0: at a character boundary; -1: outside).
// A grammar state that keeps every such string of up to k characters alive allows all the
// slice tokens of <= k characters at once; only the other tokens need a trie walk.
int32_t slice_next(int32_t l, uint8_t b);

class TokenVocab {
 public:
  // token_bytes[i]: raw bytes of token i (empty for control / special tokens: never allowed
  // inside the grammar). eog_ids: allowed exactly when the grammar is in an accepting state.
  TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eog_ids);

  int32_t n_vocab() const { return static_cast<int32_t>(bytes_.size()); }
  size_t n_words() const { return (bytes_.size() + 31) / 32; }
  const std::string& token_bytes(int32_t id) const { return bytes_[id]; }
  const std::vector<int32_t>& eog_ids() const { return eog_; }
  bool is_eog(int32_t id) const;
  // The trie of every token (grammar tokens: non-empty, not eog).
  const Trie& trie() const { return all_; }
  const std::vector<TrieNode>& nodes() const { return all_.nodes; }
  const std::vector<int32_t>& dups(int32_t token_field) const { return all_.dups(token_field); }
  uint32_t parent(uint32_t node) const { return all_.parent[node]; }
  size_t max_token_len() const { return all_.max_len; }
  std::string prefix(int32_t node) const { return all_.prefix(node); }

  // The trie of the tokens outside the string slice.
  const Trie& rest_trie() const { return rest_; }
  // Most characters (started ones) of a slice token.
  int32_t slice_max_chars() const { return static_cast<int32_t>(slice_upto_.size()) - 1; }
  // n_words() bits: the slice tokens of at most k characters (k clipped to slice_max_chars()).
  const uint32_t* slice_upto(int32_t k) const;

  // Cross-grammar cache of lexeme masks, keyed by Grammar::lexeme_signature.
  std::shared_ptr<const MaskEntry> lexeme_entry(const std::string& sig) const;
  void store_lexeme_entry(const std::string& sig, std::shared_ptr<const MaskEntry> e) const;

  static constexpr uint32_t kNoParent = Trie::kNoParent;

 private:
  void build_slice(const std::vector<int32_t>& ids);

  std::vector<std::string> bytes_;
  std::vector<int32_t> eog_;
  std::vector<uint8_t> eog_flag_;
  Trie all_, rest_;
  std::vector<std::vector<uint32_t>> slice_upto_;  // [k]: cumulative bitsets, k = 0..max

  struct LexemeCache {
    std::mutex mu;
    std::unordered_map<std::string, std::shared_ptr<const MaskEntry>> map;
  };
  std::unique_ptr<LexemeCache> cache_ = std::make_unique<LexemeCache>();  // movable vocab
};

// Token bytes from the tokenizer: token_piece(id, /*render_control=*/false); control tokens
// get no bytes; eog ids from the tokenizer.
TokenVocab from_tokenizer(const ds::Tokenizer& tok);

}  // namespace ds::structured
