// CUDA twins of kernels/cpu/activation.h (elementwise; device pointers; y may alias an input
// element for element). Status codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/activation.h"  // GeluKind

namespace ds::cuda {

using cpu::GeluKind;

// y[i] = silu(gate[i]) * up[i]
cudaError_t swiglu(const float* gate, const float* up, size_t n, float* y, cudaStream_t stream);

// y[t][i] = x[t][i] * sigmoid(gate[t][i]) for i < dim, row strides given.
cudaError_t sigmoid_gate(const float* x, size_t x_stride, const float* gate, size_t gate_stride, size_t n_rows,
                         size_t dim, float* y, size_t y_stride, cudaStream_t stream);

// GELU, kTanh (torch's approximate="tanh") or kErf (exact), with tanhf / erff: the CPU's formulas,
// so the two differ by libm ulps only. y may alias x. float4 loads when x and y are 16-byte aligned.
cudaError_t gelu(GeluKind kind, const float* x, size_t n, float* y, cudaStream_t stream);

// y[r][i] += bias[i] for r < n_rows, i < dim (rows y_stride apart): one f32 add, so the CPU's bits.
// float4 accesses when y and bias are 16-byte aligned and dim, y_stride are multiples of 4.
cudaError_t add_bias(float* y, size_t y_stride, size_t n_rows, size_t dim, const float* bias, cudaStream_t stream);

// y[i] += x[i]
cudaError_t add_inplace(float* y, const float* x, size_t n, cudaStream_t stream);

}  // namespace ds::cuda
