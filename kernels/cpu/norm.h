// Normalizations (qwen35-model-spec.md §4.3, §5.3, §5.5, §6). f32 in, f32 out.
// Rows are `dim` contiguous floats; consecutive rows are `stride` floats apart (stride >= dim),
// so per-head norms can run in place inside interleaved projections. In-place (y == x) is allowed.
#pragma once

#include <cstddef>

namespace ds::cpu {

// y = x / sqrt(mean(x^2) + eps) * w   (w may be nullptr: no gain). GGUF gains include the +1.
void rms_norm(const float* x, size_t x_stride, const float* w, float eps, size_t n_rows, size_t dim, float* y,
              size_t y_stride);

// Gated RMSNorm of GDN outputs: y = rms_norm(o; w) * silu(z). Rows contiguous (stride = dim).
void gated_rms_norm(const float* o, const float* z, const float* w, float eps, size_t n_rows, size_t dim, float* y);

// LayerNorm with gain and bias (the vision tower): y = (x - mean) / sqrt(var + eps) * w + b, the
// variance over `dim` (biased, as torch). w / b may be nullptr (gain 1 / bias 0).
void layer_norm(const float* x, size_t x_stride, const float* w, const float* b, float eps, size_t n_rows, size_t dim,
                float* y, size_t y_stride);

// y = x / sqrt(sum(x^2) + eps)  (HF/FLA l2norm form).
void l2_norm(const float* x, size_t x_stride, float eps, size_t n_rows, size_t dim, float* y, size_t y_stride);

}  // namespace ds::cpu
