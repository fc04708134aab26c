#include "coordinator/structured/token_trie.h"

#include <algorithm>
#include <numeric>

#include "coordinator/tokenizer/tokenizer.h"

namespace ds::structured {

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eog_ids)
    : bytes_(std::move(token_bytes)), eog_(std::move(eog_ids)), eog_flag_(bytes_.size(), 0) {
  for (int32_t id : eog_)
    if (id >= 0 && id < n_vocab()) eog_flag_[id] = 1;
  std::vector<int32_t> order;
  for (int32_t i = 0; i < n_vocab(); ++i)
    if (!bytes_[i].empty() && !eog_flag_[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  // Sorted keys: a path stack of open nodes; a node's subtree closes when popped.
  std::vector<uint32_t> path;
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[id];
    max_len_ = std::max(max_len_, s.size());
    size_t common = 0;
    if (prev) {
      const size_t lim = std::min({prev->size(), s.size(), path.size()});
      while (common < lim && (*prev)[common] == s[common]) ++common;
    }
    while (path.size() > common) {
      nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t k = common; k < s.size(); ++k) {
      parent_.push_back(path.empty() ? kNoParent : path.back());
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(TrieNode{static_cast<uint8_t>(s[k]), -1, 0});
    }
    TrieNode& leaf = nodes_[path.back()];
    if (leaf.token == -1) {
      leaf.token = id;
    } else if (leaf.token >= 0) {
      dups_.push_back({leaf.token, id});
      leaf.token = -static_cast<int32_t>(dups_.size()) - 1;
    } else {
      dups_[-leaf.token - 2].push_back(id);
    }
    prev = &s;
  }
  while (!path.empty()) {
    nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
}

bool TokenVocab::is_eog(int32_t id) const {
  return id >= 0 && id < n_vocab() && eog_flag_[id];
}

std::string TokenVocab::prefix(int32_t node) const {
  std::string out;
  for (uint32_t n = static_cast<uint32_t>(node); n != kNoParent; n = parent_[n])
    out.push_back(static_cast<char>(nodes_[n].byte));
  std::reverse(out.begin(), out.end());
  return out;
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
