#include "coordinator/tokenizer/piece_cache.h"

namespace ds::tok {

bool PieceCache::lookup(std::string_view piece, std::vector<int32_t>& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = map_.find(piece);
  if (it == map_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::insert(std::string_view piece, const int32_t* ids, size_t n) {
  if (capacity_ == 0 || piece.size() > kMaxPieceBytes) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (map_.size() >= capacity_) map_.clear();
  map_.emplace(std::string(piece), std::vector<int32_t>(ids, ids + n));
}

void PieceCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
}

size_t PieceCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

}  // namespace ds::tok
