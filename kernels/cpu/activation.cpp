#include "kernels/cpu/activation.h"

#include <cmath>

namespace ds::cpu {

float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

void swiglu(const float* gate, const float* up, size_t n, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = silu(gate[i]) * up[i];
}

void sigmoid_gate(const float* x, size_t x_stride, const float* gate, size_t gate_stride, size_t n_rows, size_t dim,
                  float* y, size_t y_stride) {
  for (size_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * x_stride;
    const float* gr = gate + r * gate_stride;
    float* yr = y + r * y_stride;
    for (size_t i = 0; i < dim; ++i) yr[i] = xr[i] * sigmoid(gr[i]);
  }
}

// Both forms in f32 as torch's CPU kernels write them: tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3))); erf: 0.5 x (1 + erf(x / sqrt 2)).
void gelu(GeluKind kind, const float* x, size_t n, float* y) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kKappa = 0.044715f;
  constexpr float kInvSqrt2 = 0.7071067811865476f;
  if (kind == GeluKind::kTanh) {
    for (size_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float inner = kSqrt2OverPi * (v + kKappa * (v * v * v));
      y[i] = 0.5f * v * (1.0f + std::tanh(inner));
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float v = x[i];
      y[i] = 0.5f * v * (1.0f + std::erf(v * kInvSqrt2));
    }
  }
}

void add_bias(float* y, size_t y_stride, size_t n_rows, size_t dim, const float* bias) {
  for (size_t r = 0; r < n_rows; ++r) {
    float* yr = y + r * y_stride;
    for (size_t i = 0; i < dim; ++i) yr[i] += bias[i];
  }
}

void add_inplace(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace ds::cpu
