#include "kernels/cpu/norm.h"

#include <cmath>

#include "kernels/cpu/activation.h"

namespace ds::cpu {
namespace {

// Sum of squares of one row, accumulated in double (the f32 result is then as exact as it gets).
double sum_squares(const float* x, size_t dim) {
  double s = 0;
  for (size_t i = 0; i < dim; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

// 1 / sqrt(mean(x^2) + eps) in f32, as the references compute it (rsqrt of an f32 variance).
float rms_scale(const float* x, size_t dim, float eps) {
  const float mean_sq = static_cast<float>(sum_squares(x, dim) / static_cast<double>(dim));
  return 1.0f / std::sqrt(mean_sq + eps);
}

}  // namespace

void rms_norm(const float* x, size_t x_stride, const float* w, float eps, size_t n_rows, size_t dim, float* y,
              size_t y_stride) {
  for (size_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    const float s = rms_scale(xr, dim, eps);
    if (w != nullptr) {
      for (size_t i = 0; i < dim; ++i) yr[i] = (xr[i] * s) * w[i];
    } else {
      for (size_t i = 0; i < dim; ++i) yr[i] = xr[i] * s;
    }
  }
}

void gated_rms_norm(const float* o, const float* z, const float* w, float eps, size_t n_rows, size_t dim, float* y) {
  for (size_t r = 0; r < n_rows; ++r) {
    const float* orow = o + r * dim;
    const float* zrow = z + r * dim;
    float* yr = y + r * dim;
    const float s = rms_scale(orow, dim, eps);
    for (size_t i = 0; i < dim; ++i) yr[i] = ((orow[i] * s) * w[i]) * silu(zrow[i]);
  }
}

// torch's LayerNorm in f32: mean and biased variance per row (accumulated in double here, then
// rounded to f32 like the references' f32 statistics), then (x - mean) * rstd * w + b. Two passes,
// so a row's statistics are read before any of its outputs is written (y may alias x).
void layer_norm(const float* x, size_t x_stride, const float* w, const float* b, float eps, size_t n_rows, size_t dim,
                float* y, size_t y_stride) {
  for (size_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    double sum = 0;
    for (size_t i = 0; i < dim; ++i) sum += xr[i];
    const float mean = static_cast<float>(sum / static_cast<double>(dim));
    double sq = 0;
    for (size_t i = 0; i < dim; ++i) {
      const double c = static_cast<double>(xr[i]) - mean;
      sq += c * c;
    }
    const float var = static_cast<float>(sq / static_cast<double>(dim));
    const float rstd = 1.0f / std::sqrt(var + eps);
    for (size_t i = 0; i < dim; ++i) {
      float v = (xr[i] - mean) * rstd;
      if (w != nullptr) v *= w[i];
      if (b != nullptr) v += b[i];
      yr[i] = v;
    }
  }
}

void l2_norm(const float* x, size_t x_stride, float eps, size_t n_rows, size_t dim, float* y, size_t y_stride) {
  for (size_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    const float sum_sq = static_cast<float>(sum_squares(xr, dim));
    const float s = 1.0f / std::sqrt(sum_sq + eps);
    for (size_t i = 0; i < dim; ++i) yr[i] = xr[i] * s;
  }
}

}  // namespace ds::cpu
