// The FFN's down projection fused with the SwiGLU before it, for prefill steps on the bf16 tensor
// cores: y = W (silu(gate) * up), the SwiGLU computed in f32 and rounded straight to the GEMM's
// bf16 activation operand. Unfused, swiglu writes the f32 product ([n][F], 400 MB at 9B and 8K
// tokens) and the GEMM reads it back to round it; here neither happens. Same f32 expression and
// the same rounding as swiglu (activation.h) followed by matmul(kBf16TensorCores), so y is
// identical bit for bit (tests/kernels/cuda/test_cuda_swiglu_matmul.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/matmul.h"

namespace ds::cuda {

// Whether swiglu_matmul takes this product: a Q8_0 matrix (GGUF order or split rows) and a step
// the bf16 tensor-core GEMM runs (n_tokens >= kTcMinTokens). Otherwise run swiglu, then matmul.
bool swiglu_matmul_applies(const WeightView& w, size_t n_tokens);

// gate, up: [n_tokens][w.cols] f32, rows contiguous; y: [n_tokens][y_stride >= w.rows].
// cudaErrorNotSupported when !swiglu_matmul_applies; cudaErrorInvalidValue /
// cudaErrorMisalignedAddress for bad pointers or strides.
cudaError_t swiglu_matmul(const WeightView& w, const float* gate, const float* up, size_t n_tokens, float* y,
                          size_t y_stride, const TcGemmOptions& tc, cudaStream_t stream);

}  // namespace ds::cuda
