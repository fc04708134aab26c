// Small-batch Q8_0 product over split rows on bf16 tensor cores (see matmul_fast.h,
// gemm_q8_split_small).
//
// Work split: a block of 8 warps owns 256 consecutive rows and a range of columns (a K split);
// each warp owns 32 rows (two m16 tiles) and every token of the call (up to 8 n8 tiles). The
// weights stream from global memory straight into registers (16-byte loads, the next slice's loads
// issued as soon as a span's registers are free), are widened to bf16(d * q) there, and meet the
// activations (rounded to bf16 once per call by a small kernel), which the block stages once per
// slice in shared memory (cp.async, three stages). With a K split, a second small kernel adds the
// partial sums up in split order (deterministic). (Staging f32 activations with the conversion in
// the block, and reducing the splits in the last block of each row block, measured slower:
// docs/history/performance-2026-11.md, session 4.)
//
// Column order: a quad of lanes (same g = lane / 4) covers a 64-column span of its rows with one
// 16-byte load each (lane c: columns 16c .. 16c + 15). The mma's k index is a permutation of the
// span's columns (k-step ks of lane c takes columns 16c + 4ks .. + 3); the activations are read
// with the same permutation, and since every weight already carries its scale (bf16(d * q), the
// same operand the prefill dequantization produces), sums may run over any column order.
#include "kernels/cuda/gemm_q8_split_small_kernels.cuh"
#include "kernels/cuda/matmul_fast.h"

namespace ds::cuda::detail {

// (KSplit: split_small_common.cuh.) Chosen from (rows, cols,
// SM count) only — never the token count — so a token's bits do not depend on how many other
// tokens share the call. Cost model in bytes per SM: the weights of the most loaded SM (waves x
// units per split) plus the partial sums written and read back (counted at the largest token
// count).
KSplit choose_split(int rows, int cols, int sms) {
  const int row_blocks = (rows + kBlockRows - 1) / kBlockRows, units = cols / kSplitUnitCols;
  const double unit_bytes = static_cast<double>(kBlockRows) * kSplitUnitCols * 34 / 32;
  double best_cost = 0;
  KSplit best;
  for (int s = 1; s <= std::min(units, kMaxSplits); ++s) {
    const int per = (units + s - 1) / s, eff = (units + per - 1) / per;  // eff <= s splits, none empty
    const long blocks = static_cast<long>(row_blocks) * eff, waves = (blocks + sms - 1) / sms;
    double cost = static_cast<double>(waves) * per * unit_bytes;
    if (eff > 1) cost += 2.0 * eff * kSplitSmallMaxTokens * rows * sizeof(float) / sms;
    if (s == 1 || cost < best_cost) {
      best_cost = cost;
      best = KSplit{eff, per * (kSplitUnitCols / kSpanCols)};
    }
  }
  return best;
}

bool gemm_q8_split_small_applies(const cpu::WeightView& w, const float* x, size_t xs, const float* y, size_t ys,
                                 size_t n_tokens) {
  if (w.type != GgmlType::Q8_0_SPLIT || n_tokens < 1 || n_tokens > kSplitSmallMaxTokens) return false;
  if (w.rows == 0 || w.cols % kSplitUnitCols != 0 || w.row_bytes != w.cols / kQ8Block * kQ8BlockBytes) return false;
  if (!aligned_to(w.data, 16) || w.row_bytes % 16 != 0 || !aligned_to(x, 4) || !aligned_to(y, 4)) return false;
  if (n_tokens > 1 && (xs < w.cols || ys < w.rows)) return false;
  return w.rows < (size_t{1} << 30) && w.cols < (size_t{1} << 24);
}

int gemm_q8_split_small_splits(size_t rows, size_t cols) {
  return choose_split(static_cast<int>(rows), static_cast<int>(cols), current_device_sm_count()).splits;
}

namespace {

// Up to 16 tokens the staged variant, beyond it the register ring (measured: docs/PERFORMANCE.md,
// Decisions measured). Both give the same bits, so the switch keeps every token batch-invariant.
int default_variant(size_t n) {
  return n <= kSplitSmallStagedMaxTokens ? 1 : 0;
}

}  // namespace

cudaError_t launch_sum_splits(const float* partial, int splits, size_t n, size_t rows, const RowSegments& out,
                              cudaStream_t stream, bool dependent) {
  const size_t total = n * rows;
  return launch_maybe_dependent(sum_splits_kernel,
                                dim3(static_cast<unsigned>(std::min<size_t>((total + 255) / 256, 132 * 8))), dim3(256),
                                0, stream, dependent && current_device_is_sm90_or_newer(), partial, splits,
                                static_cast<int>(n), static_cast<int>(rows), out);
}

bool row_segments_fit(const RowSegments& out, size_t rows, size_t n) {
  if (out.n < 1 || out.n > kMaxRowSegments || out.first[0] != 0 || out.first[out.n] != rows) return false;
  for (int i = 0; i < out.n; ++i) {
    const size_t seg_rows = out.first[i + 1] - out.first[i];
    if (out.first[i + 1] <= out.first[i] || out.y[i] == nullptr || !aligned_to(out.y[i], 4)) return false;
    if (n > 1 && out.ys[i] < seg_rows) return false;
  }
  return true;
}

cudaError_t split_small_rows_status(const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                    const RowSegments& out) {
  if (w.type != GgmlType::Q8_0_SPLIT) return cudaErrorNotSupported;
  if (out.n < 1 || !gemm_q8_split_small_applies(w, x, xs, out.y[0], w.rows, n) || !row_segments_fit(out, w.rows, n)) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t gemm_q8_split_small(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                                cudaStream_t stream, bool dependent) {
  if (w.type != GgmlType::Q8_0_SPLIT) return cudaErrorNotSupported;
  if (!gemm_q8_split_small_applies(w, x, xs, y, ys, n)) return cudaErrorInvalidValue;
  return run_segments(default_variant(n), w, x, xs, n, RowSegments::whole(y, w.rows, n > 1 ? ys : w.rows), stream,
                      dependent);
}

cudaError_t gemm_q8_split_small_rows(const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                     const RowSegments& out, cudaStream_t stream, bool dependent) {
  if (const cudaError_t e = split_small_rows_status(w, x, xs, n, out); e != cudaSuccess) return e;
  return run_segments(default_variant(n), w, x, xs, n, out, stream, dependent);
}

}  // namespace ds::cuda::detail
