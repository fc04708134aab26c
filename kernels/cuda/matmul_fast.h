// Internal (not part of the public contract): the fast Q8_0 paths behind ds::cuda::matmul.
//
//  * gemm_q8_tc: n_tokens >= kTcMinTokens. Q8_0 weights are dequantized (d * q rounded to bf16)
//    into a per-(device, stream) workspace in row chunks, the activations are rounded f32 -> bf16
//    once, and a bf16 mma.sync (m16n8k16, f32 accumulation) GEMM with a 4-stage cp.async pipeline
//    writes f32 y, or the same bf16 operands go to cuBLASLt (gemm_cublas.h; the default), and a
//    persistent bf16 weight copy may replace the per-call dequantization. Precision: two bf16 roundings (weight and
//    activation), |err| <= 2^-8 sum|w x|.
//  * gemv_q8: n_tokens <= kGemvMaxTokens. Raw Q8_0 rows are streamed with coalesced 8-byte loads
//    through shared memory, 32 rows a block, one lane per row (warp-uniform activation loads);
//    the block's warps split the row and their partials are added in a fixed order. f32 math
//    (exact dequantization, block partial sums scaled by d): f32 accuracy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cuda/matmul.h"  // kTcMinTokens, kGemvMaxTokens

namespace ds::cuda::detail {

// MatmulPrecision::kBf16TensorCores (the caller's choice; the CUDA backend's default) turns the
// tensor-core GEMM on for ds::cuda::matmul; kF32 keeps every path f32-exact. See matmul.h.

bool gemm_q8_tc_applies(const cpu::WeightView& w, size_t n_tokens);
// tc picks the GEMM kernel (cuBLASLt or mma.sync) and an optional persistent bf16 weight copy.
cudaError_t gemm_q8_tc(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                       const TcGemmOptions& tc, cudaStream_t stream);
// y = W (silu(gate) * up) with gate, up contiguous [n][w.cols] f32: the SwiGLU product rounded
// straight to the bf16 operand (swiglu_matmul.h). Same preconditions as gemm_q8_tc.
cudaError_t swiglu_gemm_q8_tc(const cpu::WeightView& w, const float* gate, const float* up, size_t n, float* y,
                              size_t ys, const TcGemmOptions& tc, cudaStream_t stream);
// A stacked matrix's product to row segments (RowSegments): per segment exactly gemm_q8_tc on its
// row range (same bits), with the activations rounded to bf16 once for all segments instead of
// once per product. tc.bf16_weights, when set, is the copy of the whole stack.
cudaError_t gemm_q8_tc_rows(const cpu::WeightView& w, const float* x, size_t xs, size_t n, const RowSegments& out,
                            const TcGemmOptions& tc, cudaStream_t stream);
// The mma.sync kernel with per-call dequantization (the tests' and the lab's reference path).
inline cudaError_t gemm_q8_tc(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                              cudaStream_t stream) {
  return gemm_q8_tc(w, x, xs, n, y, ys, TcGemmOptions{.kernel = TcGemmKernel::kMmaSync, .bf16_weights = nullptr},
                    stream);
}

bool gemv_q8_applies(const cpu::WeightView& w, const float* x, size_t xs, size_t n_tokens);
cudaError_t gemv_q8(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                    cudaStream_t stream);

// Q8_0 matrices in the split-rows device layout (GgmlType::Q8_0_SPLIT, common/q8_split.h):
// 1..kGemvSplitMaxTokens tokens, coalesced 16-byte quant loads straight into registers
// (gemv_q8_split.cu). Deterministic and batch-invariant (a token's bits do not depend on n).
inline constexpr size_t kGemvSplitMaxTokens = 8;
// Up to this many tokens one launch reads the weights once; cuda::matmul sends larger small
// batches of split rows to the small-batch bf16 GEMM in the bf16 mode (TcGemmOptions::split_small).
inline constexpr size_t kGemvSplitBestTokens = 4;
bool gemv_q8_split_applies(const cpu::WeightView& w, const float* x, size_t xs, size_t n_tokens);
// pdl: launched as a programmatic dependent launch on sm_90+ (it may start loading weights while
// the previous kernel in the stream finishes; activations are read after it completed).
cudaError_t gemv_q8_split(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                          cudaStream_t stream, bool pdl = false);
// Variants: 0 (kGemvSplitDefaultVariant) the int8x3 dot product for tall matrices and the float one
// for short ones, as the shape picks (gemv_q8_split.cu explains both); 1 (kGemvSplitMmaVariant) int8
// tensor cores, the same instructions for 1..4 tokens (gemv_q8_split_mma.cu; shapes it does not
// take run variant 0). Each is batch-invariant; their results differ in rounding (each within
// its bound in test_cuda_gemv_split.cpp). Either dot forced: tools/kernel_lab/variants_lab.h.
inline constexpr int kGemvSplitVariants = 2, kGemvSplitMmaVariant = 1, kGemvSplitDefaultVariant = 0;
cudaError_t gemv_q8_split_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y,
                                  size_t ys, cudaStream_t stream, bool pdl = false);
// A stacked matrix's GEMV with its rows written to row segments (RowSegments), 1..kGemvSplitMaxTokens
// tokens: each row's bits are those of its own matrix's gemv_q8_split (the launch geometry
// depends on the columns only), in one launch per 4 tokens instead of one per part.
// cudaErrorNotSupported for another weight type, cudaErrorInvalidValue where it does not fit.
cudaError_t gemv_q8_split_rows(const cpu::WeightView& w, const float* x, size_t xs, size_t n, const RowSegments& out,
                               cudaStream_t stream, bool pdl = false);
cudaError_t gemv_q8_split_rows_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                       const RowSegments& out, cudaStream_t stream, bool pdl = false);
// Variant kGemvSplitMmaVariant's kernel (gemv_q8_split_mma.cu): y = W x, or with `up` W (silu(x) *
// up), in launches of 4 tokens to row segments; the launch geometry depends on the columns only.
// Takes any split-rows matrix gemv_q8_split_applies to whose activations fit in shared memory (up to
// ~25K columns); cudaErrorNotSupported, before any launch, for a matrix it does not take.
// act_scratch (16-byte aligned, gemv_q8_split_mma_act_bytes(w.cols)): the activations are quantized
// once per 4 tokens by a launch of their own into it instead of in every block of the GEMV (the
// same bits; worth it on wide inputs at several tokens: docs/history/performance-2026-11.md, session 11).
cudaError_t gemv_q8_split_mma(const cpu::WeightView& w, const float* x, const float* up, size_t xs, size_t n,
                              const RowSegments& out, cudaStream_t stream, bool pdl, void* act_scratch = nullptr);
size_t gemv_q8_split_mma_act_bytes(size_t cols);
// (Its other block shape lives in the kernel lab: tools/kernel_lab/variants_lab.h.)
// Whether variant 0 runs the int8x3 dot (else the float one) for a rows x cols matrix (tests, lab).
bool gemv_q8_split_int_dot(size_t rows, size_t cols);
// The FFN's down projection with its SwiGLU folded into the activation loads: y = W (silu(gate) *
// up), gate and up rows at stride xs (16-byte aligned). The same f32 expression as the swiglu kernel
// (activation.h), so the bits equal swiglu then gemv_q8_split, one launch (and one [n][cols] round
// trip through memory) fewer per decode step's FFN.
cudaError_t gemv_q8_split_swiglu(const cpu::WeightView& w, const float* gate, const float* up, size_t xs, size_t n,
                                 float* y, size_t ys, cudaStream_t stream, bool pdl = false);
// act_scratch: as gemv_q8_split_mma's (variant kGemvSplitMmaVariant only; ignored by the others).
cudaError_t gemv_q8_split_swiglu_variant(int variant, const cpu::WeightView& w, const float* gate, const float* up,
                                         size_t xs, size_t n, float* y, size_t ys, cudaStream_t stream,
                                         bool pdl = false, void* act_scratch = nullptr);

// Launch shapes of the GEMV kernel (gemv_q8_kernels.cuh): 0 (kGemvDefaultVariant): 8 warps, 1 quad
// in flight per warp, 2 blocks/SM; 1 (kGemvWideVariant): 8 warps, 2 quads, 1 block/SM. 4 and 8
// tokens use at most 4 warps. They differ in rounding order only (each row's warp partials are
// added in warp order). gemv_q8 uses 0 for 1-2 tokens and 1 for 3-8 (fastest in the kernel lab:
// docs/history/performance-2026-11.md); the lab's other shapes are in tools/kernel_lab/variants_lab.h.
inline constexpr int kGemvVariants = 2, kGemvDefaultVariant = 0, kGemvWideVariant = 1;
cudaError_t gemv_q8_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y,
                            size_t ys, cudaStream_t stream);

// Small batches over split rows on bf16 tensor cores (gemm_q8_split_small.cu; issue 14's batched
// decode): 1..kSplitSmallMaxTokens tokens, each weight read once per call straight into registers
// and widened there to bf16(d * q) — the operand the prefill dequantization writes — against the
// activations rounded to bf16 once (f32 accumulation): the prefill GEMM's precision, |err| <=
// 2^-8 sum|w x|, without its dequantization pass (which costs ~3 bytes per weight per call). The
// K split depends on (rows, cols, SM count) only, so a token's bits are the same for every n.
// Needs Q8_0_SPLIT with cols % 256 == 0, 16-byte aligned rows; x, y 4-byte aligned. Three launches
// at most: activations to bf16, the product, the sum of the K splits' partials (stream workspace).
inline constexpr size_t kSplitSmallMaxTokens = 64;
bool gemm_q8_split_small_applies(const cpu::WeightView& w, const float* x, size_t xs, const float* y, size_t ys,
                                 size_t n_tokens);
// dependent: its kernels as programmatic dependent launches (sm_90+): the weights' first loads are
// issued before the previous kernel in the stream has finished (same bits).
cudaError_t gemm_q8_split_small(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                                cudaStream_t stream, bool dependent = false);
// It runs one of two launch variants (same bits; gemm_q8_split_small_kernels.cuh): weights staged in
// shared memory (cp.async) up to kSplitSmallStagedMaxTokens tokens, else through a register ring.
// Either variant for any token count: tools/kernel_lab/variants_lab.h.
inline constexpr size_t kSplitSmallStagedMaxTokens = 16;
// The same product with its rows going to segments (matmul.h RowSegments; checked: in order, covering
// every row, y 4-byte aligned, ys >= the segment's rows).
cudaError_t gemm_q8_split_small_rows(const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                     const RowSegments& out, cudaStream_t stream, bool dependent = false);
bool row_segments_fit(const RowSegments& out, size_t rows, size_t n);
// The checks of the small-batch GEMM's `_rows` call:
// cudaErrorNotSupported for another weight type, cudaErrorInvalidValue where the product or the
// segments do not fit (gemm_q8_split_small_applies, row_segments_fit), else cudaSuccess.
cudaError_t split_small_rows_status(const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                    const RowSegments& out);
// out rows = the sum, in split order, of partial[s][t][r] (s < splits, t < n, r < rows): the K-split
// sum of the small-batch tensor-core GEMM (rows < 2^30, n <= 64).
cudaError_t launch_sum_splits(const float* partial, int splits, size_t n, size_t rows, const RowSegments& out,
                              cudaStream_t stream, bool dependent = false);
// The K split gemm_q8_split_small uses for a shape on the current device (tests, lab).
int gemm_q8_split_small_splits(size_t rows, size_t cols);
// x [n][xs] f32 -> out [n][cols] bf16 (round to nearest even), contiguous; optionally as a dependent
// launch (common.cuh launch_maybe_dependent).
cudaError_t launch_x_to_bf16(const float* x, size_t xs, size_t n, size_t cols, __nv_bfloat16* out, cudaStream_t stream,
                             bool dependent = false);

// Grow-only device scratch owned by (current device, stream); valid until the next call on the same
// stream asks for more. Returns nullptr (and the CUDA error in *err) when allocation fails.
void* stream_workspace(size_t bytes, cudaStream_t stream, cudaError_t* err);

}  // namespace ds::cuda::detail
