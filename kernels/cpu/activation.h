// Elementwise activations. n contiguous floats unless strides are given.
#pragma once

#include <cstddef>

namespace ds::cpu {

inline float silu(float x) {
  return x / (1.0f + __builtin_expf(-x));
}
inline float sigmoid(float x) {
  return 1.0f / (1.0f + __builtin_expf(-x));
}
// log(1 + e^x), identity above 20 like the references.
float softplus(float x);

// SwiGLU: y[i] = silu(gate[i]) * up[i]   (y may alias gate or up)
void swiglu(const float* gate, const float* up, size_t n, float* y);

// Attention output gate: y[t][i] = x[t][i] * sigmoid(gate[t][i]) for i < dim, row strides given.
void sigmoid_gate(const float* x, size_t x_stride, const float* gate, size_t gate_stride, size_t n_rows, size_t dim,
                  float* y, size_t y_stride);

// y[i] += x[i]
void add_inplace(float* y, const float* x, size_t n);

}  // namespace ds::cpu
