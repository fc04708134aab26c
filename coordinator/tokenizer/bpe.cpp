#include "coordinator/tokenizer/bpe.h"

#include <algorithm>

#include "common/error.h"
#include "coordinator/tokenizer/byte_level.h"

namespace ds::tok {

namespace {

constexpr uint64_t kEmpty = ~uint64_t{0};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t hash_key(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

// Min-heap order: lowest rank first, then leftmost position (merges of equal rank apply
// left to right, as in the reference BPE).
bool heap_after(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
}

}  // namespace

BpeMerges::BpeMerges(const Vocab& vocab, const std::vector<std::string_view>& merges)
    : n_vocab_(vocab.size()), n_merges_(merges.size()) {
  for (unsigned b = 0; b < 256; ++b) {
    const std::string mapped(byte_to_mapped_utf8(static_cast<uint8_t>(b)));
    const auto id = vocab.find(mapped);
    byte_token_[b] = id ? *id : -1;
    byte_symbol_[b] = symbol_for(vocab, mapped);
  }
  size_t cap = 16;
  while (cap < merges.size() * 2) cap <<= 1;
  keys_.assign(cap, kEmpty);
  values_.resize(cap);
  mask_ = cap - 1;

  std::string left;
  std::string right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view m = merges[rank];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    if (sp == std::string_view::npos) {
      throw ConfigError("tokenizer.ggml.merges[" + std::to_string(rank) + "] has no space: '" + std::string(m) + "'");
    }
    left.assign(m.substr(0, sp));
    right.assign(m.substr(sp + 1));
    const int32_t l = symbol_for(vocab, left);
    const int32_t r = symbol_for(vocab, right);
    add_merge(l, r, static_cast<uint32_t>(rank), symbol_for(vocab, left + right));
  }
}

int32_t BpeMerges::symbol_for(const Vocab& vocab, const std::string& mapped) {
  if (const auto id = vocab.find(mapped)) return *id;
  const auto it = synthetic_index_.find(mapped);
  if (it != synthetic_index_.end()) return it->second;
  const int32_t id = n_vocab_ + static_cast<int32_t>(synthetic_bytes_.size());
  std::string raw;
  unmap_bytes(mapped, raw);  // a text outside the byte table can never be formed anyway
  synthetic_bytes_.push_back(std::move(raw));
  synthetic_index_.emplace(mapped, id);
  return id;
}

void BpeMerges::add_merge(int32_t left, int32_t right, uint32_t rank, int32_t result) {
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = hash_key(key) & mask_;; i = (i + 1) & mask_) {
    if (keys_[i] == key) return;  // duplicate pair: the first (lowest) rank wins
    if (keys_[i] == kEmpty) {
      keys_[i] = key;
      values_[i] = {rank, result};
      return;
    }
  }
}

const BpeMerges::Merge* BpeMerges::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = hash_key(key) & mask_;; i = (i + 1) & mask_) {
    if (keys_[i] == key) return &values_[i];
    if (keys_[i] == kEmpty) return nullptr;
  }
}

void BpeMerges::push_candidate(BpeScratch& s, int32_t left) const {
  if (left < 0) return;
  const int32_t right = s.symbols[static_cast<size_t>(left)].next;
  if (right < 0) return;
  const int32_t lid = s.symbols[static_cast<size_t>(left)].id;
  const int32_t rid = s.symbols[static_cast<size_t>(right)].id;
  const Merge* m = find_merge(lid, rid);
  if (!m) return;
  s.heap.push_back({m->rank, left, lid, rid, m->result});
  std::push_heap(s.heap.begin(), s.heap.end(), heap_after);
}

void BpeMerges::emit_symbol(int32_t id, std::vector<int32_t>& out) const {
  if (id < n_vocab_) {
    out.push_back(id);
    return;
  }
  // Fallback: the per-byte tokens of a symbol the vocabulary lacks.
  for (char c : synthetic_bytes_[static_cast<size_t>(id - n_vocab_)]) {
    const int32_t t = byte_token_[static_cast<uint8_t>(c)];
    if (t >= 0) out.push_back(t);
  }
}

void BpeMerges::encode_piece(std::string_view piece, BpeScratch& s, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(piece.size());
  if (n == 0) return;
  s.symbols.resize(piece.size());
  s.heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    s.symbols[static_cast<size_t>(i)] = {byte_symbol_[static_cast<uint8_t>(piece[static_cast<size_t>(i)])], i - 1,
                                         i + 1 < n ? i + 1 : -1};
  }
  for (int32_t i = 0; i + 1 < n; ++i) push_candidate(s, i);

  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), heap_after);
    const BpeScratch::Candidate c = s.heap.back();
    s.heap.pop_back();
    BpeScratch::Symbol& l = s.symbols[static_cast<size_t>(c.left)];
    // Stale when either side changed since the push (symbol texts only grow, so an id
    // never comes back to an old value at the same position).
    if (l.id != c.left_id || l.next < 0) continue;
    BpeScratch::Symbol& r = s.symbols[static_cast<size_t>(l.next)];
    if (r.id != c.right_id) continue;
    l.id = c.result;
    r.id = -1;
    l.next = r.next;
    if (r.next >= 0) s.symbols[static_cast<size_t>(r.next)].prev = c.left;
    push_candidate(s, l.prev);
    push_candidate(s, c.left);
  }
  for (int32_t i = 0; i >= 0; i = s.symbols[static_cast<size_t>(i)].next) {
    emit_symbol(s.symbols[static_cast<size_t>(i)].id, out);
  }
}

}  // namespace ds::tok
