// Internal: the small-batch GEMM over split rows (gemm_q8_split_small.cu, bf16 tensor cores): the
// K split of a shape and the row-segment destinations. It tiles 256 rows per block and splits K in
// whole 256-column units, and the splits' partial sums go through launch_sum_splits
// (matmul_fast.h) in split order.
#pragma once

#include <cstddef>

#include "kernels/cuda/matmul.h"  // RowSegments

namespace ds::cuda::detail {

inline constexpr int kSplitSmallBlockRows = 256;  // rows of one thread block
inline constexpr int kSplitSmallSpanCols = 64;    // K splits are counted in spans of 64 columns
inline constexpr int kSplitSmallUnitCols = 256;   // and are whole units of 256 columns

// The K split of a shape: `splits` column ranges of `spans` spans each (the last may be shorter,
// never empty).
struct KSplit {
  int splits = 1, spans = 0;
};

// Chosen from (rows, cols, SM count) only — never the token count — so a token's bits do not
// depend on how many other tokens share the call (gemm_q8_split_small.cu has the cost model).
KSplit choose_split(int rows, int cols, int sms);

// Where row r of token t goes in a RowSegments destination (segments in row order). Unrolled
// selects, not an indexed loop: a kernel parameter indexed at run time is copied to local memory.
__device__ __forceinline__ float* segment_out(const RowSegments& s, int r, int t) {
  float* base = s.y[0];
  size_t stride = s.ys[0], first = 0;
#pragma unroll
  for (int i = 1; i < kMaxRowSegments; ++i) {
    if (i < s.n && static_cast<size_t>(r) >= s.first[i]) {
      base = s.y[i];
      stride = s.ys[i];
      first = s.first[i];
    }
  }
  return base + static_cast<size_t>(t) * stride + (static_cast<size_t>(r) - first);
}

// Where a product's rows go: partial[split][t][r] when the K is split (launch_sum_splits then adds
// the splits up), else straight to the caller's row segments.
struct Destination {
  float* partial;
  RowSegments rows;
};

// A warp's mma accumulators (rows warp_row + 16 mt + g (+ 8), tokens 8 j + 2 c (+ 1): the m16n8
// C fragment layout both kernels share) to the Destination, split blockIdx.y's partials.
template <int NT>
__device__ __forceinline__ void store_acc(const float (&acc)[2][NT][4], int warp_row, int g, int c, int rows, int n,
                                          const Destination& d) {
  float* part = d.partial == nullptr ? nullptr : d.partial + blockIdx.y * static_cast<size_t>(n) * rows;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = warp_row + 16 * mt + g + 8 * (e / 2), t = 8 * j + 2 * c + e % 2;
        if (r >= rows || t >= n) continue;
        *(part != nullptr ? part + static_cast<size_t>(t) * rows + r : segment_out(d.rows, r, t)) = acc[mt][j][e];
      }
    }
  }
}

}  // namespace ds::cuda::detail
