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
  const RopeTable tab = detail::make_rope_table(n_rot, sections, theta);
  const unsigned grid = static_cast<unsigned>(n_tokens < 65535u * 16u ? n_tokens : 65535u * 16u);
  return detail::launch_dependent_if_enabled(rope_kernel, dim3(grid), dim3(kThreads), 0, stream, x, n_tokens,
                                             token_stride, n_heads, head_stride, n_rot / 2, positions, tab);
}

}  // namespace ds::cuda
