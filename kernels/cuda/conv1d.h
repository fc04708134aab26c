// CUDA twin of kernels/cpu/conv1d.h: causal depthwise conv1d with carried state, then SiLU.
// x: [n_tokens, channels] (row stride x_stride), weight: [channels][kernel], state:
// [kernel-1][channels] oldest first (updated in place), y: [n_tokens, channels], y must not alias
// x. All device pointers. Status codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace ds::cuda {

cudaError_t causal_conv1d_silu(const float* x, size_t x_stride, size_t n_tokens, size_t channels, const float* weight,
                               size_t kernel, float* state, float* y, cudaStream_t stream);

}  // namespace ds::cuda
