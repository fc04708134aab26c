// Decode GEMV for Q8_0 weights in the split-rows layout (common/q8_split.h), 1..8 tokens.
//
// Why a separate layout: in GGUF order the quants of a 34-byte block are 2-byte aligned, so the
// GGUF-order GEMV (gemv_q8.cu) stages every weight through registers and shared memory before a
// lane can read its row. With each row's quants contiguous, a lane reads its 16 quants of a row
// with ONE coalesced 16-byte load straight into registers (a warp reads 512 contiguous bytes).
//
// Work split. Column slices of 512: lane L of the warp that owns slice s handles columns
// s*512 + 16L .. +16 of the rows, so its activations stay in registers (loaded, and for the int8
// dot quantized, once per block when the warp owns one slice). The grid is persistent (as many
// blocks as fit on the GPU): block b takes row ranges b, b + gridDim.x, ... of kRangeRows rows,
// its warps (geometry() below) taking slices w, w + warps, ... Rows stream in groups of UR with the
// next group's loads issued before the current one is computed, the first group's before the
// activations are read and the next range's before the block's barrier (the first version, one
// 8-row item per warp and no prefetch, kept too few loads in flight: 53-60% of HBM, measured).
// Every 8 rows (4 for 3-4 tokens) the lanes' partials are reduced by a fixed butterfly into shared
// memory [slice][row][token]; after each range every row is the sum of its slices in slice order.
//
// Two dot products of a row's 16 quants q with the lane's 16 activations x (per token):
//  * float: q widened exactly (PRMT + FADD), 16 f32 fma in column order. ~3.3 instructions per
//    weight: at full bandwidth that alone would keep the SM's issue slots ~45% busy.
//  * int8x3: x is written once per block as x = s1*a + s2*b + s3*c + e with int8 a, b, c per
//    16-column chunk (s1 = max|x|/127, s2 = s1/252, s3 = s2/252; |e| <= s3/2 ~ 2^-23.3 max|x|),
//    and the row's products are three exact int32 dp4a sums (dp4a: 4 multiply-adds in one
//    instruction), combined in f32: ~1.2 instructions per weight plus the quantization (~200
//    instructions per chunk and token, amortized over the block's rows). Error: below 2^-22 *
//    max|x_chunk| * sum|w| on top of the f32 rounding (bound in the parity test).
// The shape picks int8x3 when each warp owns one slice (the quantization done once per block;
// <= 12 slices, i.e. up to 6144 columns) and float otherwise (the kernel lab can force either).
//
// Determinism and batch invariance: every addition happens in an order fixed by the shape (which
// also picks the dot kind); a token's arithmetic is the same for any number of companions, so a
// row's bits do not depend on how many tokens run with it: a verify row of 1 + 3 tokens gives the
// bits of a plain decode step (cuda::matmul sends 5+ tokens to the small-batch GEMM in the bf16
// mode). 5..8 tokens here run as two launches.
#include "kernels/cuda/gemv_q8_split_kernels.cuh"
#include "kernels/cuda/matmul_fast.h"

namespace ds::cuda::detail {

bool gemv_q8_split_applies(const cpu::WeightView& w, const float* x, size_t xs, size_t n_tokens) {
  if (w.type != GgmlType::Q8_0_SPLIT || n_tokens < 1 || n_tokens > kGemvSplitMaxTokens) return false;
  if (w.rows == 0 || w.cols == 0 || w.cols % kSliceCols != 0 || w.row_bytes != w.cols / kQ8Block * kQ8BlockBytes) {
    return false;
  }
  if (!aligned_to(w.data, 16) || !aligned_to(x, 16) || (n_tokens > 1 && xs % 4 != 0)) return false;
  // int row / column indices; the partials of one 8-row item must fit in shared memory
  return w.rows < (size_t{1} << 30) && w.cols < (size_t{1} << 24) &&
         w.cols / kSliceCols * kRangeRows * kMaxTokensPerLaunch * sizeof(float) <= kPartialBytesMax;
}

namespace {

// The GEMV of x (or, with `up`, of silu(x) * up) in launches of up to 4 tokens, its rows to `out`.
cudaError_t run_variant(int variant, const cpu::WeightView& w, const float* x, const float* up, size_t xs, size_t n,
                        const RowSegments& out, cudaStream_t stream, bool pdl, void* act_scratch = nullptr) {
  if (variant < 0 || variant >= kGemvSplitVariants) return cudaErrorInvalidValue;
  if (!gemv_q8_split_applies(w, x, xs, n)) return cudaErrorInvalidValue;
  if (up != nullptr && !aligned_to(up, 16)) return cudaErrorInvalidValue;
  if (variant == kGemvSplitMmaVariant) {  // shapes it does not take run the default variant
    const cudaError_t e = gemv_q8_split_mma(w, x, up, xs, n, out, stream, pdl, act_scratch);
    if (e != cudaErrorNotSupported) return e;
  }
  return run_dot(SplitDot::kAuto, w, x, up, xs, n, out, stream, pdl);
}

}  // namespace

cudaError_t gemv_q8_split_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y,
                                  size_t ys, cudaStream_t stream, bool pdl) {
  return run_variant(variant, w, x, nullptr, xs, n, RowSegments::whole(y, w.rows, ys), stream, pdl);
}

cudaError_t gemv_q8_split_rows_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                       const RowSegments& out, cudaStream_t stream, bool pdl) {
  if (w.type != GgmlType::Q8_0_SPLIT) return cudaErrorNotSupported;
  if (!row_segments_fit(out, w.rows, n)) return cudaErrorInvalidValue;
  return run_variant(variant, w, x, nullptr, xs, n, out, stream, pdl);
}

cudaError_t gemv_q8_split_rows(const cpu::WeightView& w, const float* x, size_t xs, size_t n, const RowSegments& out,
                               cudaStream_t stream, bool pdl) {
  return gemv_q8_split_rows_variant(kGemvSplitDefaultVariant, w, x, xs, n, out, stream, pdl);
}

cudaError_t gemv_q8_split_swiglu_variant(int variant, const cpu::WeightView& w, const float* gate, const float* up,
                                         size_t xs, size_t n, float* y, size_t ys, cudaStream_t stream, bool pdl,
                                         void* act_scratch) {
  if (up == nullptr) return cudaErrorInvalidValue;
  return run_variant(variant, w, gate, up, xs, n, RowSegments::whole(y, w.rows, ys), stream, pdl, act_scratch);
}

cudaError_t gemv_q8_split_swiglu(const cpu::WeightView& w, const float* gate, const float* up, size_t xs, size_t n,
                                 float* y, size_t ys, cudaStream_t stream, bool pdl) {
  return gemv_q8_split_swiglu_variant(kGemvSplitDefaultVariant, w, gate, up, xs, n, y, ys, stream, pdl);
}

bool gemv_q8_split_int_dot(size_t /*rows*/, size_t cols) {
  return geometry(static_cast<int>(cols), SplitDot::kAuto).int_dot;
}

cudaError_t gemv_q8_split(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                          cudaStream_t stream, bool pdl) {
  return gemv_q8_split_variant(kGemvSplitDefaultVariant, w, x, xs, n, y, ys, stream, pdl);
}

}  // namespace ds::cuda::detail
