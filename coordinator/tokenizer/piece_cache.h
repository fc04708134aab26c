// Memoised BPE results per pre-token piece. Natural text repeats the same words constantly,
// so most pieces skip BPE entirely. Bounded: when full the cache is emptied (cheap, and a
// working set refills it within a few thousand pieces). Shared by threads under a mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ds::tok {

class PieceCache {
 public:
  // Pieces longer than this are not cached (rare, and they would dominate memory).
  static constexpr size_t kMaxPieceBytes = 64;

  explicit PieceCache(size_t capacity) : capacity_(capacity) {}

  // Appends the cached ids of `piece` to `out`; false when absent.
  bool lookup(std::string_view piece, std::vector<int32_t>& out) const;
  void insert(std::string_view piece, const int32_t* ids, size_t n);
  void clear();
  size_t size() const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map_;
};

}  // namespace ds::tok
