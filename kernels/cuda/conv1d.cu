#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv1d.h"

namespace ds::cuda {
namespace {

constexpr int kThreads = 256;

// Raw input at time tau (state rows are times -hist .. -1), channel c.
__device__ __forceinline__ float conv_input(const float* x, size_t xs, const float* state, size_t channels, size_t hist,
                                            long long tau, size_t c) {
  return tau < 0 ? state[static_cast<size_t>(tau + static_cast<long long>(hist)) * channels + c]
                 : x[static_cast<size_t>(tau) * xs + c];
}

// y[t][c] = silu(sum_m w[c][m] * input(t - hist + m, c)), taps summed oldest first like the CPU.
// One thread per (token, channel); reads the state before conv_state_kernel rewrites it. The
// general fallback of conv_run_kernel below (any kernel size, any alignment).
__global__ void conv_kernel(const float* x, size_t xs, size_t n_tokens, size_t channels, const float* weight,
                            size_t kernel, const float* state, float* y) {
  const size_t hist = kernel - 1;
  for (size_t e = detail::global_thread(); e < n_tokens * channels; e += detail::global_threads()) {
    const size_t t = e / channels, c = e % channels;
    const float* wc = weight + c * kernel;
    float acc = 0.0f;
    for (size_t m = 0; m < kernel; ++m) {
      acc += wc[m] *
             conv_input(x, xs, state, channels, hist, static_cast<long long>(t + m) - static_cast<long long>(hist), c);
    }
    y[t * channels + c] = detail::silu(acc);
  }
}

// The same outputs with the same arithmetic (the taps in the same order, so the same bits), for a
// K-tap kernel: a thread owns V consecutive channels (V = 4: 16-byte loads) and a run of kRunTokens
// tokens, sliding a K-row window down the run in registers, so every input is read once instead of
// K times and no thread divides 64-bit indices (the per-element kernel above ran a 9B layer far
// below HBM bandwidth: docs/history/performance-2026-11.md, session 6).
constexpr int kRunTokens = 16;

template <int V>
struct Lanes {
  float v[V];
};

template <int V>
__device__ __forceinline__ Lanes<V> load_lanes(const float* p) {
  Lanes<V> r;
  if constexpr (V == 4) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    r.v[0] = a.x, r.v[1] = a.y, r.v[2] = a.z, r.v[3] = a.w;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) r.v[i] = p[i];
  }
  return r;
}

template <int V>
__device__ __forceinline__ void store_lanes(float* p, const Lanes<V>& r) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = r.v[i];
  }
}

template <int K, int V>
__global__ void conv_run_kernel(const float* __restrict__ x, size_t xs, size_t n_tokens, size_t channels,
                                const float* __restrict__ weight, const float* __restrict__ state,
                                float* __restrict__ y) {
  const size_t c0 = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) * V;
  if (c0 >= channels) return;
  const long long t0 = static_cast<long long>(blockIdx.y) * kRunTokens;
  float w[V][K];
#pragma unroll
  for (int i = 0; i < V; ++i) {
#pragma unroll
    for (int m = 0; m < K; ++m) w[i][m] = weight[(c0 + i) * K + m];
  }
  // win[m] = input at time t - (K - 1) + m for the token t being computed.
  Lanes<V> win[K];
#pragma unroll
  for (int m = 0; m < K - 1; ++m) {
    const long long tau = t0 - (K - 1) + m;
    win[m + 1] = load_lanes<V>(tau < 0 ? state + static_cast<size_t>(tau + K - 1) * channels + c0
                                       : x + static_cast<size_t>(tau) * xs + c0);
  }
  const long long end = std::min<long long>(t0 + kRunTokens, static_cast<long long>(n_tokens));
  for (long long t = t0; t < end; ++t) {
#pragma unroll
    for (int m = 0; m < K - 1; ++m) win[m] = win[m + 1];
    win[K - 1] = load_lanes<V>(x + static_cast<size_t>(t) * xs + c0);
    Lanes<V> out;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float acc = 0.0f;
#pragma unroll
      for (int m = 0; m < K; ++m) acc += w[i][m] * win[m].v[i];
      out.v[i] = detail::silu(acc);
    }
    store_lanes<V>(y + static_cast<size_t>(t) * channels + c0, out);
  }
}

// Launches conv_run_kernel when it takes the shape (4 taps, the Qwen3.5 conv; V = 4 when every
// row start is 16-byte aligned); false when the general kernel must run.
bool launch_conv_runs(const float* x, size_t xs, size_t n_tokens, size_t channels, const float* weight, size_t kernel,
                      const float* state, float* y, cudaStream_t stream) {
  constexpr int kTaps = 4;
  const size_t runs = (n_tokens + kRunTokens - 1) / kRunTokens;
  if (kernel != kTaps || runs > 65535) return false;
  const bool vec = channels % 4 == 0 && (n_tokens == 1 || xs % 4 == 0) && detail::aligned_to(x, 16) &&
                   detail::aligned_to(y, 16) && detail::aligned_to(state, 16);
  const size_t groups = vec ? channels / 4 : channels;
  const dim3 grid(static_cast<unsigned>((groups + kThreads - 1) / kThreads), static_cast<unsigned>(runs));
  if (vec) {
    conv_run_kernel<kTaps, 4><<<grid, kThreads, 0, stream>>>(x, xs, n_tokens, channels, weight, state, y);
  } else {
    conv_run_kernel<kTaps, 1><<<grid, kThreads, 0, stream>>>(x, xs, n_tokens, channels, weight, state, y);
  }
  return true;
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
  if (!launch_conv_runs(x, x_stride, n_tokens, channels, weight, kernel, state, y, stream)) {
    conv_kernel<<<detail::grid_for(n_tokens * channels, kThreads), kThreads, 0, stream>>>(
        x, x_stride, n_tokens, channels, weight, kernel, state, y);
  }
  if (const cudaError_t e = detail::launch_status(); e != cudaSuccess) return e;
  if (kernel == 1) return cudaSuccess;
  conv_state_kernel<<<detail::grid_for(channels, kThreads), kThreads, 0, stream>>>(x, x_stride, n_tokens, channels,
                                                                                   kernel, state);
  return detail::launch_status();
}

}  // namespace ds::cuda
