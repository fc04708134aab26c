#include "kernels/cuda/attention_prep.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/norm_rope.cuh"
#include "kernels/cuda/rope.h"

namespace ds::cuda {
namespace {

using detail::kWarp;
using detail::RopeTable;

constexpr unsigned kWarpsPerBlock = 4;  // jobs (heads) of one token per block
constexpr unsigned kThreads = kWarpsPerBlock * kWarp;

// Sizes of a step, passed by value.
struct PrepDims {
  size_t n_tokens, n_heads, n_kv_heads, head_dim, q_head_stride, half;
  float eps;
};

// One q or k head, by one warp: normed in place, then roped in place. The rope's pairs are
// (i, i + half), which belong to different lanes unless half is a multiple of 32, so the normed
// values must be visible to the whole warp first.
__device__ __forceinline__ void norm_rope_head(float* z, const float* gain, const PrepDims& dm, const float* cos_s,
                                               const float* sin_s, unsigned lane) {
  detail::warp_rms_norm_row(z, gain, dm.eps, dm.head_dim, z, lane);
  __syncwarp();
  for (size_t i = lane; i < dm.half; i += kWarp) detail::rope_rotate_pair(z, i, dm.half, cos_s[i], sin_s[i]);
}

__device__ __forceinline__ void copy_head(const float* src, float* dst, size_t dim, unsigned lane) {
  for (size_t i = lane; i < dim; i += kWarp) dst[i] = src[i];
}

// blockIdx.x: token; warp w of blockIdx.y: job blockIdx.y * kWarpsPerBlock + w of that token, in
// order the n_heads q heads, the n_kv_heads k heads, the n_kv_heads v heads.
__global__ void __launch_bounds__(kThreads)
    attention_prep_kernel(float* qg, float* k, const float* v, const float* q_norm, const float* k_norm,
                          const int32_t* positions, const uint32_t* kv_rows, float* k_pool, float* v_pool, PrepDims dm,
                          RopeTable tab) {
  detail::wait_for_previous_kernel();  // q/k/v rows, positions and rows are the previous kernel's / copy's
  __shared__ float cos_s[kMaxRopeHalf], sin_s[kMaxRopeHalf];
  const size_t t = blockIdx.x;
  for (size_t i = threadIdx.x; i < dm.half; i += blockDim.x) {
    detail::rope_cos_sin(tab, i, positions, dm.n_tokens, t, &cos_s[i], &sin_s[i]);
  }
  __syncthreads();
  const size_t job = size_t{blockIdx.y} * kWarpsPerBlock + threadIdx.x / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  const size_t d = dm.head_dim, row = dm.n_kv_heads * d;
  if (job < dm.n_heads) {
    norm_rope_head(qg + (t * dm.n_heads + job) * dm.q_head_stride, q_norm, dm, cos_s, sin_s, lane);
  } else if (job < dm.n_heads + dm.n_kv_heads) {
    const size_t h = job - dm.n_heads;
    float* z = k + t * row + h * d;
    norm_rope_head(z, k_norm, dm, cos_s, sin_s, lane);
    __syncwarp();  // the copy reads every lane's rotated values
    copy_head(z, k_pool + size_t{kv_rows[t]} * row + h * d, d, lane);
  } else if (job < dm.n_heads + 2 * dm.n_kv_heads) {
    const size_t h = job - dm.n_heads - dm.n_kv_heads;
    copy_head(v + t * row + h * d, v_pool + size_t{kv_rows[t]} * row + h * d, d, lane);
  }
}

bool all_f32_aligned(const cpu::AttentionPrep& p) {
  return detail::aligned_to(p.qg, 4) && detail::aligned_to(p.k, 4) && detail::aligned_to(p.v, 4) &&
         detail::aligned_to(p.q_norm, 4) && detail::aligned_to(p.k_norm, 4) && detail::aligned_to(p.positions, 4) &&
         detail::aligned_to(p.kv_rows, 4) && detail::aligned_to(p.k_pool, 4) && detail::aligned_to(p.v_pool, 4);
}

}  // namespace

cudaError_t attention_prep(const cpu::AttentionPrep& p, cudaStream_t stream) {
  if (cpu::attention_prep_problem(p) != nullptr) return cudaErrorInvalidValue;
  if (p.n_tokens == 0) return cudaSuccess;
  if (p.head_dim > kAttentionPrepMaxHeadDim) return cudaErrorNotSupported;
  if (p.n_rot / 2 > kMaxRopeHalf || p.n_tokens > detail::kMaxGridX) return cudaErrorInvalidValue;
  if (!all_f32_aligned(p)) return cudaErrorMisalignedAddress;
  const size_t jobs = p.n_heads + 2 * p.n_kv_heads;
  const size_t groups = (jobs + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (groups > 65535) return cudaErrorInvalidValue;  // grid.y limit
  const PrepDims dm{p.n_tokens, p.n_heads, p.n_kv_heads, p.head_dim, p.q_head_stride, p.n_rot / 2, p.eps};
  const RopeTable tab = detail::make_rope_table(p.n_rot, p.sections, p.theta);
  const dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>(groups));
  return detail::launch_dependent_if_enabled(attention_prep_kernel, grid, dim3(kThreads), 0, stream, p.qg, p.k,
                                             static_cast<const float*>(p.v), p.q_norm, p.k_norm, p.positions, p.kv_rows,
                                             p.k_pool, p.v_pool, dm, tab);
}

}  // namespace ds::cuda
