#include <initializer_list>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/common.cuh"

namespace ds::cuda {
namespace {

constexpr int kThreads = 256;

// Each kernel may run as a dependent launch (common.cuh launch_dependent_if_enabled): it waits for
// the previous kernel before touching any activation.
__global__ void swiglu_kernel(const float* gate, const float* up, size_t n, float* y) {
  detail::wait_for_previous_kernel();
  for (size_t i = detail::global_thread(); i < n; i += detail::global_threads()) y[i] = detail::silu(gate[i]) * up[i];
}

__global__ void sigmoid_gate_kernel(const float* x, size_t xs, const float* gate, size_t gs, size_t n_rows, size_t dim,
                                    float* y, size_t ys) {
  detail::wait_for_previous_kernel();
  for (size_t e = detail::global_thread(); e < n_rows * dim; e += detail::global_threads()) {
    const size_t r = e / dim, i = e % dim;
    y[r * ys + i] = x[r * xs + i] * detail::sigmoid(gate[r * gs + i]);
  }
}

__global__ void add_kernel(float* y, const float* x, size_t n) {
  detail::wait_for_previous_kernel();
  for (size_t i = detail::global_thread(); i < n; i += detail::global_threads()) y[i] += x[i];
}

cudaError_t check_f32(std::initializer_list<const float*> ptrs) {
  for (const float* p : ptrs) {
    if (p == nullptr) return cudaErrorInvalidValue;
    if (!detail::aligned_to(p, 4)) return cudaErrorMisalignedAddress;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t swiglu(const float* gate, const float* up, size_t n, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (const cudaError_t e = check_f32({gate, up, y}); e != cudaSuccess) return e;
  return detail::launch_dependent_if_enabled(swiglu_kernel, dim3(detail::grid_for(n, kThreads)), dim3(kThreads), 0,
                                             stream, gate, up, n, y);
}

cudaError_t sigmoid_gate(const float* x, size_t x_stride, const float* gate, size_t gate_stride, size_t n_rows,
                         size_t dim, float* y, size_t y_stride, cudaStream_t stream) {
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (const cudaError_t e = check_f32({x, gate, y}); e != cudaSuccess) return e;
  if (n_rows > 1 && (x_stride < dim || gate_stride < dim || y_stride < dim)) return cudaErrorInvalidValue;
  return detail::launch_dependent_if_enabled(sigmoid_gate_kernel, dim3(detail::grid_for(n_rows * dim, kThreads)),
                                             dim3(kThreads), 0, stream, x, x_stride, gate, gate_stride, n_rows, dim, y,
                                             y_stride);
}

cudaError_t add_inplace(float* y, const float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (const cudaError_t e = check_f32({y, x}); e != cudaSuccess) return e;
  return detail::launch_dependent_if_enabled(add_kernel, dim3(detail::grid_for(n, kThreads)), dim3(kThreads), 0, stream,
                                             y, x, n);
}

}  // namespace ds::cuda
