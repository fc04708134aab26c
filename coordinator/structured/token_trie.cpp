#include "coordinator/structured/token_trie.h"

#include <algorithm>
#include <numeric>

#include "coordinator/tokenizer/tokenizer.h"

namespace ds::structured {

namespace {

// Trie of `ids` (already sorted by bytes): a path stack of open nodes; a node's subtree closes
// when popped.
Trie build_trie(const std::vector<std::string>& bytes, const std::vector<int32_t>& ids) {
  Trie tr;
  std::vector<uint32_t> path;
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = bytes[id];
    tr.max_len = std::max(tr.max_len, s.size());
    size_t common = 0;
    if (prev) {
      const size_t lim = std::min({prev->size(), s.size(), path.size()});
      while (common < lim && (*prev)[common] == s[common]) ++common;
    }
    while (path.size() > common) {
      tr.nodes[path.back()].end = static_cast<uint32_t>(tr.nodes.size());
      path.pop_back();
    }
    for (size_t k = common; k < s.size(); ++k) {
      tr.parent.push_back(path.empty() ? Trie::kNoParent : path.back());
      path.push_back(static_cast<uint32_t>(tr.nodes.size()));
      tr.nodes.push_back(TrieNode{static_cast<uint8_t>(s[k]), -1, 0});
    }
    TrieNode& leaf = tr.nodes[path.back()];
    if (leaf.token == -1) {
      leaf.token = id;
    } else if (leaf.token >= 0) {
      tr.dup_lists.push_back({leaf.token, id});
      leaf.token = -static_cast<int32_t>(tr.dup_lists.size()) - 1;
    } else {
      tr.dup_lists[-leaf.token - 2].push_back(id);
    }
    prev = &s;
  }
  while (!path.empty()) {
    tr.nodes[path.back()].end = static_cast<uint32_t>(tr.nodes.size());
    path.pop_back();
  }
  return tr;
}

// Started characters of `s` in the string slice, or -1 when s is not a slice string.
int32_t slice_chars(const std::string& s) {
  int32_t l = 0, n = 0;
  for (char c : s) {
    if (l == 0) ++n;
    l = slice_next(l, static_cast<uint8_t>(c));
    if (l < 0) return -1;
  }
  return n;
}

// Longer slice tokens (rare) go to the rest trie: bounds the per-k bitsets and the work of
// checking a grammar state against the slice.
constexpr int32_t kMaxSliceChars = 32;

}  // namespace

int32_t slice_next(int32_t l, uint8_t b) {
  // Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). States: 0
  // boundary, 1..3 that many continuation bytes left, 4 after E0, 5 after ED, 6 after F0, 7
  // after F4.
  const bool cont = b >= 0x80 && b <= 0xBF;
  switch (l) {
    case 0:
      if (b >= 0x20 && b < 0x80) return b == '"' || b == '\\' ? -1 : 0;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 4;
      if (b == 0xED) return 5;
      if (b >= 0xE1 && b <= 0xEF) return 2;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 3;
      if (b == 0xF4) return 7;
      return -1;
    case 1:
    case 2:
    case 3:
      return cont ? l - 1 : -1;
    case 4:
      return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 5:
      return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 6:
      return b >= 0x90 && b <= 0xBF ? 2 : -1;
    case 7:
      return b >= 0x80 && b <= 0x8F ? 2 : -1;
    default:
      return -1;
  }
}

std::string Trie::prefix(int32_t node) const {
  std::string out;
  for (uint32_t n = static_cast<uint32_t>(node); n != kNoParent; n = parent[n])
    out.push_back(static_cast<char>(nodes[n].byte));
  std::reverse(out.begin(), out.end());
  return out;
}

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eog_ids)
    : bytes_(std::move(token_bytes)), eog_(std::move(eog_ids)), eog_flag_(bytes_.size(), 0) {
  for (int32_t id : eog_)
    if (id >= 0 && id < n_vocab()) eog_flag_[id] = 1;
  std::vector<int32_t> order;
  for (int32_t i = 0; i < n_vocab(); ++i)
    if (!bytes_[i].empty() && !eog_flag_[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  all_ = build_trie(bytes_, order);
  build_slice(order);
}

void TokenVocab::build_slice(const std::vector<int32_t>& ids) {
  std::vector<int32_t> rest;
  std::vector<std::pair<int32_t, int32_t>> in;  // (chars, id)
  int32_t max_chars = 0;
  for (int32_t id : ids) {
    const int32_t c = slice_chars(bytes_[id]);
    if (c < 0 || c > kMaxSliceChars) {
      rest.push_back(id);
    } else {
      in.emplace_back(c, id);
      max_chars = std::max(max_chars, c);
    }
  }
  rest_ = build_trie(bytes_, rest);
  slice_upto_.assign(static_cast<size_t>(max_chars) + 1, std::vector<uint32_t>(n_words(), 0));
  for (auto [c, id] : in) slice_upto_[c][id >> 5] |= uint32_t{1} << (id & 31);
  for (size_t k = 1; k < slice_upto_.size(); ++k)
    for (size_t w = 0; w < n_words(); ++w) slice_upto_[k][w] |= slice_upto_[k - 1][w];
}

const uint32_t* TokenVocab::slice_upto(int32_t k) const {
  return slice_upto_[static_cast<size_t>(std::clamp(k, 0, slice_max_chars()))].data();
}

bool TokenVocab::is_eog(int32_t id) const {
  return id >= 0 && id < n_vocab() && eog_flag_[id];
}

std::shared_ptr<const MaskEntry> TokenVocab::lexeme_entry(const std::string& sig) const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  auto it = cache_->map.find(sig);
  return it == cache_->map.end() ? nullptr : it->second;
}

void TokenVocab::store_lexeme_entry(const std::string& sig, std::shared_ptr<const MaskEntry> e) const {
  constexpr size_t kMaxEntries = 8192;
  std::lock_guard<std::mutex> lock(cache_->mu);
  if (cache_->map.size() < kMaxEntries) cache_->map.emplace(sig, std::move(e));
}

TokenVocab from_tokenizer(const ds::Tokenizer& tok) {
  std::vector<std::string> bytes(static_cast<size_t>(tok.n_vocab()));
  for (int32_t i = 0; i < tok.n_vocab(); ++i)
    if (!tok.is_control(i)) bytes[i] = std::string(tok.token_piece(i, /*render_control=*/false));
  return TokenVocab(std::move(bytes), tok.eog_ids());
}

}  // namespace ds::structured
