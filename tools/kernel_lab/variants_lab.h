// The launch variants production does not use, kept for the kernel lab (and for the tests that hold
// each to its bound): they share their kernel templates with production through
// kernels/cuda/*_kernels.cuh, so a lab figure times the same kernel code. Production keeps only the
// winners (kernels/cuda/matmul_fast.h). Library ds_kernel_lab_variants.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/matmul.h"   // WeightView (device pointers here)
#include "kernels/cuda/matmul.h"  // RowSegments

namespace ds::kernel_lab {

// GGUF-order Q8_0 decode GEMV (gemv_q8_kernels.cuh) in launch shape 0..kGemvQ8Shapes-1: 0: 8 warps,
// 1 quad in flight per warp, 2 blocks/SM; 1: 8 warps, 2 quads, 1 block/SM (0 and 1 are production's,
// matmul_fast.h gemv_q8_variant); 2: 4 warps, 1 quad, 4 blocks/SM; 3: 4 warps, 2 quads, 2 blocks/SM;
// 4: 16 warps, 1 quad, 1 block/SM (80-96 KB of dynamic shared memory; for matrices with few 32-row
// blocks, not yet measured). 4 and 8 tokens use at most 4 warps. Shapes differ in rounding order only.
inline constexpr int kGemvQ8Shapes = 5;
cudaError_t gemv_q8_shape(int shape, const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                          cudaStream_t stream);

// The split-rows decode GEMV on int8 tensor cores (gemv_q8_split_mma_kernels.cuh) in block shape
// 0..kSplitMmaShapes-1: 0: 16 warps, one block per SM (production's, matmul_fast.h
// gemv_q8_split_mma); 1: 8 warps, two blocks per SM. A shape with other warps per block sums in
// another order, so its bits differ from the default's. Arguments as gemv_q8_split_mma's.
inline constexpr int kSplitMmaShapes = 2;
cudaError_t gemv_q8_split_mma_shape(int shape, const cpu::WeightView& w, const float* x, const float* up, size_t xs,
                                    size_t n, const cuda::RowSegments& out, cudaStream_t stream, bool pdl,
                                    void* act_scratch = nullptr);

// The split-rows decode GEMV (gemv_q8_split_kernels.cuh) in the lab's numbering, the one of its
// history: 0 the dot the shape picks and 3 the int8 tensor cores (production's two variants, run
// through matmul_fast.h gemv_q8_split_variant), 1 the int8x3 dot and 2 the float dot forced on
// every shape. Arguments and errors as the production calls'.
inline constexpr int kSplitVariants = 4, kSplitAuto = 0, kSplitInt8x3 = 1, kSplitFloat = 2, kSplitMma = 3;
cudaError_t gemv_q8_split_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y,
                                  size_t ys, cudaStream_t stream, bool pdl = false);
cudaError_t gemv_q8_split_rows_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                       const cuda::RowSegments& out, cudaStream_t stream, bool pdl = false);
cudaError_t gemv_q8_split_swiglu_variant(int variant, const cpu::WeightView& w, const float* gate, const float* up,
                                         size_t xs, size_t n, float* y, size_t ys, cudaStream_t stream,
                                         bool pdl = false, void* act_scratch = nullptr);
// Whether `variant` (not kSplitMma) runs the int8x3 dot for a rows x cols matrix.
bool gemv_q8_split_int_dot(size_t rows, size_t cols, int variant);

// The small-batch bf16 GEMM over split rows (gemm_q8_split_small_kernels.cuh) in launch variant 0
// (weights through a register ring) or 1 (weights staged in shared memory, cp.async) for any token
// count; production picks 1 up to kSplitSmallStagedMaxTokens tokens, else 0. Same bits (same
// fragments, K split and order). Arguments and errors as matmul_fast.h gemm_q8_split_small's.
inline constexpr int kSplitSmallVariants = 2;
cudaError_t gemm_q8_split_small_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                        float* y, size_t ys, cudaStream_t stream, bool dependent = false);

}  // namespace ds::kernel_lab
