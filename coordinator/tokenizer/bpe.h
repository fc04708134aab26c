// Byte-level BPE by merge rank (qwen35-model-spec.md §8.3 step 4), run on integer symbols.
// A symbol is a vocab id, or a "synthetic" id >= n_vocab for an intermediate merge result
// whose text is not in the vocabulary (never the case for Qwen vocabularies, but it keeps
// the algorithm exact for any file). Symbols still synthetic at the end fall back to their
// per-byte tokens.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "coordinator/tokenizer/vocab.h"

namespace ds::tok {

// Reusable buffers for encode_piece (one per encoding call, not shared between threads).
struct BpeScratch {
  struct Symbol {
    int32_t id;    // current symbol; -1 once merged into its left neighbour
    int32_t prev;  // index of the left neighbour, -1 at the start
    int32_t next;  // index of the right neighbour, -1 at the end
  };
  struct Candidate {
    uint32_t rank;
    int32_t left;     // index of the left symbol
    int32_t left_id;  // ids when the candidate was pushed; stale candidates are skipped
    int32_t right_id;
    int32_t result;  // symbol the merge produces
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BpeMerges {
 public:
  // `merges` are "A B" strings in byte-level-mapped form; rank = index.
  // Throws ds::ConfigError when a merge has no separating space.
  BpeMerges(const Vocab& vocab, const std::vector<std::string_view>& merges);

  size_t n_merges() const { return n_merges_; }
  // Appends the ids of one pre-token (raw bytes) to `out`.
  void encode_piece(std::string_view piece, BpeScratch& scratch, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    uint32_t rank;
    int32_t result;
  };
  int32_t symbol_for(const Vocab& vocab, const std::string& mapped);
  void add_merge(int32_t left, int32_t right, uint32_t rank, int32_t result);
  const Merge* find_merge(int32_t left, int32_t right) const;
  void push_candidate(BpeScratch& s, int32_t left) const;
  void emit_symbol(int32_t id, std::vector<int32_t>& out) const;

  int32_t n_vocab_ = 0;
  size_t n_merges_ = 0;
  std::array<int32_t, 256> byte_symbol_{};                    // initial symbol of each byte
  std::array<int32_t, 256> byte_token_{};                     // vocab id of each byte, -1 when absent
  std::vector<std::string> synthetic_bytes_;                  // raw bytes of synthetic symbol n_vocab + i
  std::unordered_map<std::string, int32_t> synthetic_index_;  // mapped text -> synthetic id

  // Open-addressing table: key (left << 32 | right), linear probing, capacity 2^k.
  std::vector<uint64_t> keys_;
  std::vector<Merge> values_;
  uint64_t mask_ = 0;
};

}  // namespace ds::tok
