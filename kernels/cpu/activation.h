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

// GELU: kTanh = torch's gelu(approximate="tanh") (gelu_pytorch_tanh, the vision blocks' MLP),
// kErf = the exact 0.5 x (1 + erf(x / sqrt 2)) (nn.GELU(), the vision merger). y may alias x.
enum class GeluKind { kTanh, kErf };
void gelu(GeluKind kind, const float* x, size_t n, float* y);

// Rows of a linear layer's output plus its bias: y[r][i] += bias[i] for r < n_rows, i < dim.
void add_bias(float* y, size_t y_stride, size_t n_rows, size_t dim, const float* bias);

// y[i] += x[i]
void add_inplace(float* y, const float* x, size_t n);

}  // namespace ds::cpu
