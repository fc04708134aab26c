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

void add_inplace(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace ds::cpu
