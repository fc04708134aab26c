// Internal (not part of the public contract): the cuBLASLt bf16 GEMM behind the tensor-core
// prefill path (gemm_tc.cu decides when it runs; matmul.h documents the numerics).
//
// y[t * ys + m] = sum_k A[m][k] B[t][k] with A [M][K] and B [N][K] row-major bf16 (K contiguous:
// the weights as stored, the activations as produced) and y f32, i.e. in cuBLAS's column-major
// terms y(M x N, ld ys) = A^T(K x M) * B(K x N), the "TN" layout its Hopper kernels prefer.
// f32 accumulation (CUBLAS_COMPUTE_32F), alpha 1, beta 0 (y is only written).
//
// Per (device, M, N, K, ys, operand alignments) the algorithm is chosen once by cuBLASLt's
// heuristic and cached with its descriptors; per (device, stream) one fixed workspace
// (kLtWorkspaceBytes) is allocated on first use or by gemm_lt_prepare, never on later calls.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace ds::cuda::detail {

// cuBLAS asks for 32 MiB on Hopper for its best kernels (stream-K, split-K scratch).
inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// Creates the device's cuBLASLt handle and the stream's workspace now (start-up), so the first
// prefill step allocates nothing for the GEMM library.
cudaError_t gemm_lt_prepare(cudaStream_t stream);

// Returns cudaErrorNotSupported when cuBLASLt has no algorithm for the shape (the caller then
// falls back to the mma.sync kernel); other failures map to the nearest CUDA error.
cudaError_t gemm_bf16_lt(const void* a_bf16, const void* b_bf16, size_t M, size_t N, size_t K, float* y, size_t ys,
                         cudaStream_t stream);

}  // namespace ds::cuda::detail
