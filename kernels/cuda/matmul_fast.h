// Internal (not part of the public contract): the fast Q8_0 paths behind ds::cuda::matmul.
//
//  * gemm_q8_tc: n_tokens >= kTcMinTokens. Q8_0 weights are dequantized (d * q rounded to bf16)
//    into a per-(device, stream) workspace in row chunks, the activations are rounded f32 -> bf16
//    once, and a bf16 mma.sync (m16n8k16, f32 accumulation) GEMM with a 4-stage cp.async pipeline
//    writes f32 y. Precision: two bf16 roundings (weight and activation), |err| <= 2^-8 sum|w x|.
//  * gemv_q8: n_tokens <= kGemvMaxTokens. Raw Q8_0 rows are streamed with coalesced 8-byte loads
//    through shared memory; each lane owns 4 whole blocks (136 bytes) and dots them with f32
//    activations in f32 (exact dequantization, block partial sums scaled by d): f32 accuracy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/matmul.h"
#include "kernels/cuda/matmul.h"  // kTcMinTokens, kGemvMaxTokens

namespace ds::cuda::detail {

// MatmulPrecision::kBf16TensorCores (the caller's choice) turns the tensor-core GEMM on for
// ds::cuda::matmul; the default kF32 keeps every path f32-exact. See matmul.h.

bool gemm_q8_tc_applies(const cpu::WeightView& w, size_t n_tokens);
cudaError_t gemm_q8_tc(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                       cudaStream_t stream);

bool gemv_q8_applies(const cpu::WeightView& w, const float* x, size_t xs, size_t n_tokens);
cudaError_t gemv_q8(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                    cudaStream_t stream);

// Grow-only device scratch owned by (current device, stream); valid until the next call on the same
// stream asks for more. Returns nullptr (and the CUDA error in *err) when allocation fails.
void* stream_workspace(size_t bytes, cudaStream_t stream, cudaError_t* err);

}  // namespace ds::cuda::detail
