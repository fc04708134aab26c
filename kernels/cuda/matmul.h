// CUDA twin of kernels/cpu/matmul.h: y = W x for a batch of tokens, W in its GGUF type (Q8_0 /
// F16 / BF16 / F32; `w.data` is a DEVICE pointer, rows at w.data + r*w.row_bytes), f32 in, f32
// accumulation, f32 out. x: [n_tokens, cols] (row stride x_stride), y: [n_tokens, rows] (row
// stride y_stride). Small batches (decode) use a GEMV with one warp per output row; larger ones a
// shared-memory tiled GEMM. Q8_0 weights take faster paths (kernels/cuda/matmul_fast.h): a
// streaming GEMV (f32 math) for n_tokens <= kGemvMaxTokens. Opt-in (precision
// kBf16TensorCores, chosen by the caller): for n_tokens >= kTcMinTokens a bf16 tensor-core GEMM
// with f32 accumulation (weights d*q and activations rounded to bf16: each output within
// 2^-8 * sum|w x| of the f32 result), ~15x the SIMT GEMM on the 9B shapes. It is off by default
// because the random-weight model fixture amplifies rounding ~10^4x (see tests/kernels/cuda/
// test_cuda_model.cpp), so the model-level parity test cannot hold bf16 prefill to any meaningful
// bound yet. It keeps grow-only device scratch per (device, stream): its first use on a stream
// allocates (not capturable in a CUDA graph then).
// Returns cudaErrorNotSupported for other weight types; other status
// codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/matmul.h"  // WeightView (a plain descriptor; here its data is on the device)

namespace ds::cuda {

using cpu::WeightView;

// Batches of at most this many tokens take the GEMV path.
inline constexpr size_t kGemvMaxTokens = 8;
// Batches of at least this many tokens with Q8_0 weights take the bf16 tensor-core GEMM (opt-in).
inline constexpr size_t kTcMinTokens = 16;

// How batched (prefill) products may be computed.
enum class MatmulPrecision {
  kF32,              // f32 math everywhere (default; matches the CPU reference to f32 rounding)
  kBf16TensorCores,  // Q8_0 batches >= kTcMinTokens on bf16 tensor cores, f32 accumulation
};

cudaError_t matmul(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, float* y, size_t y_stride,
                   MatmulPrecision precision, cudaStream_t stream);

inline cudaError_t matmul(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, float* y,
                          size_t y_stride, cudaStream_t stream) {
  return matmul(w, x, x_stride, n_tokens, y, y_stride, MatmulPrecision::kF32, stream);
}

}  // namespace ds::cuda
