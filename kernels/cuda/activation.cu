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

// The CPU's formulas (kernels/cpu/activation.cpp), with the CUDA libm's tanhf / erff.
template <GeluKind K>
__device__ __forceinline__ float gelu_of(float x) {
  if constexpr (K == GeluKind::kTanh) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * (x * x * x))));
  } else {
    constexpr float kInvSqrt2 = 0.7071067811865476f;
    return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  }
}

template <GeluKind K>
__global__ void gelu_kernel(const float* x, size_t n, float* y) {
  detail::wait_for_previous_kernel();
  for (size_t i = detail::global_thread(); i < n; i += detail::global_threads()) y[i] = gelu_of<K>(x[i]);
}

// x and y 16-byte aligned: whole float4s, then the last n % 4 elements one thread each.
template <GeluKind K>
__global__ void gelu4_kernel(const float* x, size_t n, float* y) {
  detail::wait_for_previous_kernel();
  const size_t n4 = n / 4;
  const auto* x4 = reinterpret_cast<const float4*>(x);
  auto* y4 = reinterpret_cast<float4*>(y);
  for (size_t i = detail::global_thread(); i < n4; i += detail::global_threads()) {
    const float4 v = x4[i];
    y4[i] = make_float4(gelu_of<K>(v.x), gelu_of<K>(v.y), gelu_of<K>(v.z), gelu_of<K>(v.w));
  }
  const size_t tail = 4 * n4 + detail::global_thread();
  if (tail < n) y[tail] = gelu_of<K>(x[tail]);
}

__global__ void add_bias_kernel(float* y, size_t ys, size_t n_rows, size_t dim, const float* bias) {
  detail::wait_for_previous_kernel();
  for (size_t e = detail::global_thread(); e < n_rows * dim; e += detail::global_threads()) {
    const size_t r = e / dim, i = e % dim;
    y[r * ys + i] += bias[i];
  }
}

// y and bias 16-byte aligned, dim and ys multiples of 4: a float4 of a row per element of the loop.
__global__ void add_bias4_kernel(float* y, size_t ys, size_t n_rows, size_t dim, const float* bias) {
  detail::wait_for_previous_kernel();
  const size_t d4 = dim / 4;
  for (size_t e = detail::global_thread(); e < n_rows * d4; e += detail::global_threads()) {
    const size_t r = e / d4, c = e % d4;
    auto* yp = reinterpret_cast<float4*>(y + r * ys) + c;
    const float4 b = reinterpret_cast<const float4*>(bias)[c];
    const float4 v = *yp;
    *yp = make_float4(v.x + b.x, v.y + b.y, v.z + b.z, v.w + b.w);
  }
}

template <GeluKind K>
cudaError_t launch_gelu(const float* x, size_t n, float* y, cudaStream_t stream) {
  if (detail::aligned_to(x, 16) && detail::aligned_to(y, 16)) {
    return detail::launch_dependent_if_enabled(gelu4_kernel<K>, dim3(detail::grid_for(n / 4 + 1, kThreads)),
                                               dim3(kThreads), 0, stream, x, n, y);
  }
  return detail::launch_dependent_if_enabled(gelu_kernel<K>, dim3(detail::grid_for(n, kThreads)), dim3(kThreads), 0,
                                             stream, x, n, y);
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

cudaError_t gelu(GeluKind kind, const float* x, size_t n, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (const cudaError_t e = check_f32({x, y}); e != cudaSuccess) return e;
  if (kind == GeluKind::kTanh) return launch_gelu<GeluKind::kTanh>(x, n, y, stream);
  if (kind == GeluKind::kErf) return launch_gelu<GeluKind::kErf>(x, n, y, stream);
  return cudaErrorInvalidValue;
}

cudaError_t add_bias(float* y, size_t y_stride, size_t n_rows, size_t dim, const float* bias, cudaStream_t stream) {
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (const cudaError_t e = check_f32({y, bias}); e != cudaSuccess) return e;
  if (n_rows > 1 && y_stride < dim) return cudaErrorInvalidValue;
  const bool whole_float4s =
      detail::aligned_to(y, 16) && detail::aligned_to(bias, 16) && dim % 4 == 0 && (n_rows == 1 || y_stride % 4 == 0);
  if (whole_float4s) {
    return detail::launch_dependent_if_enabled(add_bias4_kernel, dim3(detail::grid_for(n_rows * dim / 4, kThreads)),
                                               dim3(kThreads), 0, stream, y, y_stride, n_rows, dim, bias);
  }
  return detail::launch_dependent_if_enabled(add_bias_kernel, dim3(detail::grid_for(n_rows * dim, kThreads)),
                                             dim3(kThreads), 0, stream, y, y_stride, n_rows, dim, bias);
}

cudaError_t add_inplace(float* y, const float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (const cudaError_t e = check_f32({y, x}); e != cudaSuccess) return e;
  return detail::launch_dependent_if_enabled(add_kernel, dim3(detail::grid_for(n, kThreads)), dim3(kThreads), 0, stream,
                                             y, x, n);
}

}  // namespace ds::cuda
