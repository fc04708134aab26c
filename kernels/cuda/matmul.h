// CUDA twin of kernels/cpu/matmul.h: y = W x for a batch of tokens, W in its GGUF type (Q8_0 /
// F16 / BF16 / F32; `w.data` is a DEVICE pointer, rows at w.data + r*w.row_bytes), f32 in, f32
// accumulation, f32 out. x: [n_tokens, cols] (row stride x_stride), y: [n_tokens, rows] (row
// stride y_stride). Small batches (decode) use a GEMV with one warp per output row; larger ones a
// shared-memory tiled GEMM. Returns cudaErrorNotSupported for other weight types; other status
// codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/matmul.h"  // WeightView (a plain descriptor; here its data is on the device)

namespace ds::cuda {

using cpu::WeightView;

// Batches of at most this many tokens take the GEMV path.
inline constexpr size_t kGemvMaxTokens = 8;

cudaError_t matmul(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, float* y, size_t y_stride,
                   cudaStream_t stream);

}  // namespace ds::cuda
