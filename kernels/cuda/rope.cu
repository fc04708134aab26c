#include "kernels/cuda/rope.h"

#include <cmath>

#include "kernels/cuda/common.cuh"

namespace ds::cuda {
namespace {

// Per frequency slot: inverse frequency and position stream. Computed on the host with the exact
// expressions of kernels/cpu/rope.cpp (f32 pow), so the device only multiplies and rotates; passed
// by value (1.3 KB of kernel parameters), which avoids a device allocation per call.
struct RopeTable {
  float inv_freq[kMaxRopeHalf];
  uint8_t stream[kMaxRopeHalf];
};

size_t stream_of_slot(size_t i, const std::array<int32_t, 4>& sections) {
  const size_t sh = sections[1] > 0 ? static_cast<size_t>(sections[1]) : 0;
  const size_t sw = sections[2] > 0 ? static_cast<size_t>(sections[2]) : 0;
  if (i % 3 == 1 && i < 3 * sh) return 1;
  if (i % 3 == 2 && i < 3 * sw) return 2;
  return 0;
}

RopeTable make_table(size_t n_rot, const std::array<int32_t, 4>& sections, float theta) {
  RopeTable tab{};
  for (size_t i = 0; i < n_rot / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(n_rot);
    tab.inv_freq[i] = 1.0f / std::pow(theta, exponent);
    tab.stream[i] = static_cast<uint8_t>(stream_of_slot(i, sections));
  }
  return tab;
}

constexpr int kThreads = 128;

// One block per token: the token's cos/sin table goes to shared memory once, then the threads
// rotate every (head, pair) of the token.
__global__ void rope_kernel(float* x, size_t n_tokens, size_t ts, size_t n_heads, size_t hs, size_t half,
                            const int32_t* positions, RopeTable tab) {
  __shared__ float cos_s[kMaxRopeHalf], sin_s[kMaxRopeHalf];
  for (size_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
    for (size_t i = threadIdx.x; i < half; i += blockDim.x) {
      const float pos = static_cast<float>(positions[tab.stream[i] * n_tokens + t]);
      const float angle = pos * tab.inv_freq[i];
      cos_s[i] = cosf(angle);
      sin_s[i] = sinf(angle);
    }
    __syncthreads();
    for (size_t e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
      const size_t h = e / half, i = e % half;
      float* z = x + t * ts + h * hs;
      const float a = z[i], b = z[i + half];
      z[i] = a * cos_s[i] - b * sin_s[i];
      z[i + half] = b * cos_s[i] + a * sin_s[i];
    }
    __syncthreads();  // the table is rewritten for the next token
  }
}

}  // namespace

cudaError_t rope_neox(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride,
                      size_t head_dim, size_t n_rot, const int32_t* positions, std::array<int32_t, 4> sections,
                      float theta, cudaStream_t stream) {
  if (n_tokens == 0 || n_heads == 0 || n_rot == 0) return cudaSuccess;
  if (x == nullptr || positions == nullptr) return cudaErrorInvalidValue;
  if (!detail::aligned_to(x, 4) || !detail::aligned_to(positions, 4)) return cudaErrorMisalignedAddress;
  if (n_rot % 2 != 0 || n_rot > head_dim || n_rot / 2 > kMaxRopeHalf) return cudaErrorInvalidValue;
  if (head_stride < head_dim || (n_tokens > 1 && token_stride < head_stride * (n_heads - 1) + head_dim)) {
    return cudaErrorInvalidValue;
  }
  const RopeTable tab = make_table(n_rot, sections, theta);
  const unsigned grid = static_cast<unsigned>(n_tokens < 65535u * 16u ? n_tokens : 65535u * 16u);
  rope_kernel<<<grid, kThreads, 0, stream>>>(x, n_tokens, token_stride, n_heads, head_stride, n_rot / 2, positions,
                                             tab);
  return detail::launch_status();
}

}  // namespace ds::cuda
