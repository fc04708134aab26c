#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/norm_rope.cuh"
#include "kernels/cuda/rope.h"

namespace ds::cuda {
namespace {

using detail::RopeTable;

constexpr int kThreads = 128;

// One block per token: the token's cos/sin table goes to shared memory once, then the threads
// rotate every (head, pair) of the token.
__global__ void rope_kernel(float* x, size_t n_tokens, size_t ts, size_t n_heads, size_t hs, size_t half,
                            const int32_t* positions, RopeTable tab) {
  detail::wait_for_previous_kernel();  // x and the positions may be the previous kernel's / copy's
  __shared__ float cos_s[kMaxRopeHalf], sin_s[kMaxRopeHalf];
  for (size_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
    for (size_t i = threadIdx.x; i < half; i += blockDim.x) {
      detail::rope_cos_sin(tab, i, positions, n_tokens, t, &cos_s[i], &sin_s[i]);
    }
    __syncthreads();
    for (size_t e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
      const size_t h = e / half, i = e % half;
      detail::rope_rotate_pair(x + t * ts + h * hs, i, half, cos_s[i], sin_s[i]);
    }
    __syncthreads();  // the table is rewritten for the next token
  }
}

cudaError_t check_heads(const float* x, const int32_t* positions, size_t n_tokens, size_t token_stride, size_t n_heads,
                        size_t head_stride, size_t head_dim) {
  if (x == nullptr || positions == nullptr) return cudaErrorInvalidValue;
  if (!detail::aligned_to(x, 4) || !detail::aligned_to(positions, 4)) return cudaErrorMisalignedAddress;
  if (head_stride < head_dim || (n_tokens > 1 && token_stride < head_stride * (n_heads - 1) + head_dim)) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

// rope_2d as a table for rope_kernel: slot i < d/4 reads stream 0 (the rows) at f_i, slot i >= d/4
// stream 1 (the columns) at f_{i - d/4}, f_j = 1 / theta^(2j / (d/2)) by the CPU's f32 expression.
RopeTable make_rope_2d_table(size_t head_dim, float theta) {
  RopeTable tab{};
  const size_t half = head_dim / 2, quarter = head_dim / 4;
  for (size_t i = 0; i < half; ++i) {
    const size_t j = i < quarter ? i : i - quarter;
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(half);
    tab.inv_freq[i] = 1.0f / std::pow(theta, exponent);
    tab.stream[i] = i < quarter ? 0 : 1;
  }
  return tab;
}

unsigned token_blocks(size_t n_tokens) {
  return static_cast<unsigned>(n_tokens < 65535u * 16u ? n_tokens : 65535u * 16u);
}

}  // namespace

cudaError_t rope_2d(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride, size_t head_dim,
                    const int32_t* positions, float theta, cudaStream_t stream) {
  if (n_tokens == 0 || n_heads == 0) return cudaSuccess;
  if (head_dim == 0 || head_dim % 4 != 0 || head_dim / 2 > kMaxRopeHalf) return cudaErrorInvalidValue;
  if (const cudaError_t e = check_heads(x, positions, n_tokens, token_stride, n_heads, head_stride, head_dim);
      e != cudaSuccess) {
    return e;
  }
  const RopeTable tab = make_rope_2d_table(head_dim, theta);
  return detail::launch_dependent_if_enabled(rope_kernel, dim3(token_blocks(n_tokens)), dim3(kThreads), 0, stream, x,
                                             n_tokens, token_stride, n_heads, head_stride, head_dim / 2, positions,
                                             tab);
}

cudaError_t rope_neox(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride,
                      size_t head_dim, size_t n_rot, const int32_t* positions, std::array<int32_t, 4> sections,
                      float theta, cudaStream_t stream) {
  if (n_tokens == 0 || n_heads == 0 || n_rot == 0) return cudaSuccess;
  if (const cudaError_t e = check_heads(x, positions, n_tokens, token_stride, n_heads, head_stride, head_dim);
      e != cudaSuccess) {
    return e;
  }
  if (n_rot % 2 != 0 || n_rot > head_dim || n_rot / 2 > kMaxRopeHalf) return cudaErrorInvalidValue;
  const RopeTable tab = detail::make_rope_table(n_rot, sections, theta);
  return detail::launch_dependent_if_enabled(rope_kernel, dim3(token_blocks(n_tokens)), dim3(kThreads), 0, stream, x,
                                             n_tokens, token_stride, n_heads, head_stride, n_rot / 2, positions, tab);
}

}  // namespace ds::cuda
