// Small-batch Q8_0 product on tensor cores (issue #14/#10): y[n, rows] = x[n, cols] . W^T for
// 1 <= n <= kMmaGemvMaxTokens, W in Q8_0 on the device (rows at w.data + r * w.row_bytes).
//
// Every weight byte is read once per call (16-byte cp.async into shared memory, two stages); the
// int8 quants are exact in bf16 and go to mma.sync m16n8k16 (bf16, f32 accumulation, runs on
// sm_80+) against the activations split into three bf16 terms x = x1 + x2 + x3 (each the bf16
// rounding of the remainder; |x - x1 - x2 - x3| <= 2^-24 |x|). One Q8_0 block (32 columns) is
// accumulated on its own and scaled by its d; the blocks are then added in column order, per
// split of K, and the splits in split order (a second tiny kernel). Error versus the f32 CPU
// reference: see mma_gemv_error_units below.
//
// Batch invariance: a token's output depends only on its own activations. The mma computes each
// output column from that column alone, the K split depends on (rows, cols, SM count) only, and
// every addition happens in the same order for any n, so a row's bits are the same whether the
// token runs alone or with 63 others.
//
// Q8_0 in GGUF order or in split rows (GgmlType::Q8_0_SPLIT, common/q8_split.h: same bits).
// Preconditions (else an error, never a launch): Q8_0 or Q8_0_SPLIT (cudaErrorNotSupported
// otherwise); w.data 16-byte aligned and w.row_bytes % 16 == 0 (cudaErrorMisalignedAddress);
// split rows: cols % 256 == 0 (cudaErrorInvalidValue); cols % 32 == 0,
// row_bytes >= cols / 32 * 34, n <= kMmaGemvMaxTokens, x_stride >= cols and y_stride >= rows when
// n > 1 (cudaErrorInvalidValue); x, y 4-byte aligned. Uses the stream's grow-only workspace
// (matmul_fast.h stream_workspace) for the split activations and the K-split partials.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/matmul.h"

namespace ds::cuda::detail {

inline constexpr size_t kMmaGemvMaxTokens = 64;

// Worst-case error bound versus the exact product, in units of u = 2^-23 times sum_i |w_i x_i|
// (w_i = d * q_i). Model of the f32-accumulating mma (as measured for V100/A100 tensor cores): the
// products are exact and the <= 17 addends (16 products + C) are aligned to the largest and
// truncated, so one mma errs by <= 17 u of the largest addend <= 17 u of its block's sum|q x|.
// Per Q8_0 block: 6 mma (2 k steps x 3 terms) -> 102 u of that block's sum|q x|; then d * block
// rounds once (u/2) and |x - x1 - x2 - x3| <= 2^-24 |x| adds u/2: these sum over the blocks to
// <= 103 u of sum|w x|. Adding a block to a split's running sum rounds once (<= u/2 of the
// whole sum each, cols / 32 blocks at most) and so does adding each split (<= kMmaGemvMaxSplits).
// Total: 104 + cols / 32 + kMmaGemvMaxSplits units (rounded up). Typical errors are far smaller
// (random walk); the parity test prints the observed worst ratio.
inline constexpr size_t kMmaGemvMaxSplits = 16;
inline constexpr size_t mma_gemv_error_units(size_t cols) {
  return 104 + cols / 32 + kMmaGemvMaxSplits;
}

// True when gemv_q8_mma accepts this product (the dispatcher falls back otherwise).
bool gemv_q8_mma_applies(const cpu::WeightView& w, const float* x, size_t xs, const float* y, size_t ys,
                         size_t n_tokens);

// Variants (same bits; they differ in load scheduling only): 0, the first version; 1 (the
// default): the next Q8_0 block's activation records prefetched into registers (<= 16 tokens;
// more run variant 0). H200, 2026-11-29 (kernel lab --gemv-mma, sum of a 9B decode step's
// matrices): variant 1 9.27 / 9.35 / 12.08 ms at 1 / 8 / 16 tokens, variant 0 10.26 / 10.08 / 12.99.
inline constexpr int kMmaGemvVariants = 2, kMmaGemvDefaultVariant = 1;
cudaError_t gemv_q8_mma_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y,
                                size_t ys, cudaStream_t stream);
inline cudaError_t gemv_q8_mma(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                               cudaStream_t stream) {
  return gemv_q8_mma_variant(kMmaGemvDefaultVariant, w, x, xs, n, y, ys, stream);
}

}  // namespace ds::cuda::detail
