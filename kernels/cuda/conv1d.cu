#include "kernels/cuda/conv1d.h"

#include "kernels/cuda/common.cuh"

namespace ds::cuda {
namespace {

constexpr int kThreads = 256;

// Raw input at time tau (state rows are times -hist .. -1), channel c.
__device__ __forceinline__ float conv_input(const float* x, size_t xs, const float* state, size_t channels,
                                            size_t hist, long long tau, size_t c) {
  return tau < 0 ? state[static_cast<size_t>(tau + static_cast<long long>(hist)) * channels + c]
                 : x[static_cast<size_t>(tau) * xs + c];
}

// y[t][c] = silu(sum_m w[c][m] * input(t - hist + m, c)), taps summed oldest first like the CPU.
// One thread per (token, channel); reads the state before conv_state_kernel rewrites it.
__global__ void conv_kernel(const float* x, size_t xs, size_t n_tokens, size_t channels, const float* weight,
                            size_t kernel, const float* state, float* y) {
  const size_t hist = kernel - 1;
  for (size_t e = detail::global_thread(); e < n_tokens * channels; e += detail::global_threads()) {
    const size_t t = e / channels, c = e % channels;
    const float* wc = weight + c * kernel;
    float acc = 0.0f;
    for (size_t m = 0; m < kernel; ++m) {
      acc += wc[m] * conv_input(x, xs, state, channels, hist,
                                static_cast<long long>(t + m) - static_cast<long long>(hist), c);
    }
    y[t * channels + c] = detail::silu(acc);
  }
}

// New state row j = raw input at time n_tokens - hist + j. One thread per channel walks j upwards:
// the source (old row n_tokens + j, or a token) is never before the destination, so it is safe in
// place — which is why rows of one channel are not split across threads.
__global__ void conv_state_kernel(const float* x, size_t xs, size_t n_tokens, size_t channels, size_t kernel,
                                  float* state) {
  const size_t hist = kernel - 1;
  for (size_t c = detail::global_thread(); c < channels; c += detail::global_threads()) {
    for (size_t j = 0; j < hist; ++j) {
      const long long tau = static_cast<long long>(n_tokens + j) - static_cast<long long>(hist);
      state[j * channels + c] = conv_input(x, xs, state, channels, hist, tau, c);
    }
  }
}

}  // namespace

cudaError_t causal_conv1d_silu(const float* x, size_t x_stride, size_t n_tokens, size_t channels, const float* weight,
                               size_t kernel, float* state, float* y, cudaStream_t stream) {
  if (kernel == 0 || n_tokens == 0 || channels == 0) return cudaSuccess;
  if (x == nullptr || weight == nullptr || y == nullptr || (kernel > 1 && state == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (!detail::aligned_to(x, 4) || !detail::aligned_to(weight, 4) || !detail::aligned_to(y, 4) ||
      !detail::aligned_to(state, 4)) {
    return cudaErrorMisalignedAddress;
  }
  if (n_tokens > 1 && x_stride < channels) return cudaErrorInvalidValue;
  conv_kernel<<<detail::grid_for(n_tokens * channels, kThreads), kThreads, 0, stream>>>(
      x, x_stride, n_tokens, channels, weight, kernel, state, y);
  if (const cudaError_t e = detail::launch_status(); e != cudaSuccess) return e;
  if (kernel == 1) return cudaSuccess;
  conv_state_kernel<<<detail::grid_for(channels, kThreads), kThreads, 0, stream>>>(x, x_stride, n_tokens, channels,
                                                                                  kernel, state);
  return detail::launch_status();
}

}  // namespace ds::cuda
