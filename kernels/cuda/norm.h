// CUDA twins of kernels/cpu/norm.h: same math, argument meaning and aliasing rules (y == x is
// allowed with equal strides). Pointers are device pointers; work is queued on `stream`.
// Launchers of kernels/cuda return cudaErrorInvalidValue for bad sizes/strides/null pointers,
// cudaErrorMisalignedAddress for a float pointer that is not 4-byte aligned, otherwise the
// launch status (execution errors surface at the next synchronizing call).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace ds::cuda {

// y = x / sqrt(mean(x^2) + eps) * w   (w may be nullptr: no gain).
cudaError_t rms_norm(const float* x, size_t x_stride, const float* w, float eps, size_t n_rows, size_t dim, float* y,
                     size_t y_stride, cudaStream_t stream);

// y = rms_norm(o; w) * silu(z), rows contiguous (stride = dim).
cudaError_t gated_rms_norm(const float* o, const float* z, const float* w, float eps, size_t n_rows, size_t dim,
                           float* y, cudaStream_t stream);

// The residual step of a decoder block in one launch: x += delta, then y = rms_norm(x; w) (all
// rows contiguous, stride = dim). Same result as add_inplace then rms_norm up to f32 summation
// order. y may equal delta, not x (y != x: x keeps the sum).
cudaError_t add_rms_norm(float* x, const float* delta, const float* w, float eps, size_t n_rows, size_t dim, float* y,
                         cudaStream_t stream);

// LayerNorm (the vision tower): y = (x - mean) / sqrt(var + eps) * w + b, var biased (as torch);
// w / b may be nullptr (gain 1 / bias 0). Two passes over the row in f32 (mean, then the sum of
// squared deviations): agrees with the CPU's to f32 reduction order (relative ~1e-6).
cudaError_t layer_norm(const float* x, size_t x_stride, const float* w, const float* b, float eps, size_t n_rows,
                       size_t dim, float* y, size_t y_stride, cudaStream_t stream);

// y = x / sqrt(sum(x^2) + eps).
cudaError_t l2_norm(const float* x, size_t x_stride, float eps, size_t n_rows, size_t dim, float* y, size_t y_stride,
                    cudaStream_t stream);

}  // namespace ds::cuda
