#include "kernels/cuda/common.cuh"
#include "kernels/cuda/l2_norm_heads.h"

namespace ds::cuda {
namespace {

using detail::kWarp;
constexpr int kRowsPerBlock = 8;

// One warp per (token, head) row; each lane reads and writes only its own indices. May run as a
// dependent launch (common.cuh launch_dependent_if_enabled): waits before touching x.
__global__ void l2_norm_heads_kernel(float* x, size_t token_stride, size_t n_rows, size_t n_heads, size_t dim,
                                     float eps) {
  detail::wait_for_previous_kernel();
  const size_t row = size_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= n_rows) return;
  const unsigned lane = threadIdx.x % kWarp;
  float* xr = x + (row / n_heads) * token_stride + (row % n_heads) * dim;
  float s = 0.0f;  // norm.cu's row_sum_squares, term for term
  for (size_t i = lane; i < dim; i += kWarp) s += xr[i] * xr[i];
  const float inv = 1.0f / sqrtf(detail::warp_sum(s) + eps);
  for (size_t i = lane; i < dim; i += kWarp) xr[i] = xr[i] * inv;
}

}  // namespace

cudaError_t l2_norm_heads(float* x, size_t token_stride, size_t n_tokens, size_t n_heads, size_t dim, float eps,
                          cudaStream_t stream) {
  if (n_tokens == 0 || n_heads == 0 || dim == 0) return cudaSuccess;
  if (dim > kL2HeadsMaxDim) return cudaErrorNotSupported;
  if (x == nullptr || (n_tokens > 1 && n_heads * dim > token_stride)) return cudaErrorInvalidValue;
  if (!detail::aligned_to(x, 4)) return cudaErrorMisalignedAddress;
  const size_t n_rows = n_tokens * n_heads;
  const size_t blocks = (n_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > detail::kMaxGridX) return cudaErrorInvalidValue;
  return detail::launch_dependent_if_enabled(l2_norm_heads_kernel, dim3(static_cast<unsigned>(blocks)),
                                             dim3(kRowsPerBlock * kWarp), 0, stream, x, token_stride, n_rows, n_heads,
                                             dim, eps);
}

}  // namespace ds::cuda
