// CUDA twins of kernels/cpu/activation.h (elementwise; device pointers; y may alias an input
// element for element). Status codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace ds::cuda {

// y[i] = silu(gate[i]) * up[i]
cudaError_t swiglu(const float* gate, const float* up, size_t n, float* y, cudaStream_t stream);

// y[t][i] = x[t][i] * sigmoid(gate[t][i]) for i < dim, row strides given.
cudaError_t sigmoid_gate(const float* x, size_t x_stride, const float* gate, size_t gate_stride, size_t n_rows,
                         size_t dim, float* y, size_t y_stride, cudaStream_t stream);

// y[i] += x[i]
cudaError_t add_inplace(float* y, const float* x, size_t n, cudaStream_t stream);

}  // namespace ds::cuda
