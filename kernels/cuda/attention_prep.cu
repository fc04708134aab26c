#include <cmath>

#include "kernels/cuda/attention_prep.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/norm_rope.cuh"
#include "kernels/cuda/rope.h"

namespace ds::cuda {
namespace {

using detail::kWarp;
using detail::RopeTable;

constexpr unsigned kWarpsPerBlock = 4;  // jobs (heads) of one token per block
constexpr unsigned kThreads = kWarpsPerBlock * kWarp;

constexpr int kMaxChunks = 8;  // 32-value chunks of a head held in registers: head_dim <= 256

// Sizes of a step, passed by value.
struct PrepDims {
  size_t n_tokens, n_heads, n_kv_heads, head_dim, q_head_stride, half;
  float eps;
};

// Where the K and V rows go: pools of k_type / v_type rows (common/kv_format.h).
struct PrepPools {
  uint8_t *k, *v;
  KvType k_type, v_type;
  size_t k_row_bytes, v_row_bytes, k_data_bytes, v_data_bytes;
  float inv_sqrt_d;  // the rotation's scale (q4r), computed on the host as the CPU reference does
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

// A head's values in registers, lane holding values lane + 32 e (head_dim a multiple of 32).
__device__ __forceinline__ void load_head(const float* src, int n_e, unsigned lane, float (&v)[kMaxChunks]) {
#pragma unroll
  for (int e = 0; e < kMaxChunks; ++e) v[e] = e < n_e ? src[lane + kWarp * e] : 0.0f;
}

// Head h (values src[0, d)) of a K or V row written to its pool row, encoded as t; rotated
// first for q4r (src left rotated). Plain types take any d; block types whole 32-value chunks.
__device__ __forceinline__ void write_head(KvType t, size_t data_bytes, float* src, uint8_t* row, size_t h, size_t d,
                                           unsigned lane, float inv_sqrt_d) {
  if (t == KvType::kF32) {
    float* dst = reinterpret_cast<float*>(row) + h * d;
    for (size_t i = lane; i < d; i += kWarp) dst[i] = src[i];
    return;
  }
  if (!kv_type_has_scales(t)) {
    for (size_t i = lane; i < d; i += kWarp) {
      const float x = src[i];
      const size_t c = h * d + i;
      if (t == KvType::kFp8) {
        row[c] = kv_encode_fp8(x);
      } else {
        reinterpret_cast<uint16_t*>(row)[c] = t == KvType::kBf16 ? kv_encode_bf16(x) : kv_encode_f16(x);
      }
    }
    return;
  }
  const int n_e = static_cast<int>(d / kKvQuantBlock);
  float v[kMaxChunks];
  load_head(src, n_e, lane, v);
  if (kv_type_rotated(t)) {
    detail::warp_hadamard(v, n_e, lane, inv_sqrt_d);
    __syncwarp();
#pragma unroll
    for (int e = 0; e < kMaxChunks; ++e) {  // the rows are left rotated, as the reference leaves them
      if (e < n_e) src[lane + kWarp * e] = v[e];
    }
  }
#pragma unroll
  for (int e = 0; e < kMaxChunks; ++e) {
    if (e < n_e) detail::warp_encode_chunk(t, v[e], row, data_bytes, h * d / kKvQuantBlock + e, lane);
  }
}

// A query head rotated in place (K stored rotated: q.k is kept by rotating q too).
__device__ __forceinline__ void rotate_head(float* z, size_t d, unsigned lane, float inv_sqrt_d) {
  const int n_e = static_cast<int>(d / kKvQuantBlock);
  float v[kMaxChunks];
  load_head(z, n_e, lane, v);
  detail::warp_hadamard(v, n_e, lane, inv_sqrt_d);
  __syncwarp();
#pragma unroll
  for (int e = 0; e < kMaxChunks; ++e) {
    if (e < n_e) z[lane + kWarp * e] = v[e];
  }
}

// blockIdx.x: token; warp w of blockIdx.y: job blockIdx.y * kWarpsPerBlock + w of that token, in
// order the n_heads q heads, the n_kv_heads k heads, the n_kv_heads v heads.
__global__ void __launch_bounds__(kThreads)
    attention_prep_kernel(float* qg, float* k, float* v, const float* q_norm, const float* k_norm,
                          const int32_t* positions, const uint32_t* kv_rows, PrepPools pools, PrepDims dm,
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
    float* z = qg + (t * dm.n_heads + job) * dm.q_head_stride;
    norm_rope_head(z, q_norm, dm, cos_s, sin_s, lane);
    if (kv_type_rotated(pools.k_type)) {
      __syncwarp();  // the rotation reads every lane's roped values
      rotate_head(z, d, lane, pools.inv_sqrt_d);
    }
  } else if (job < dm.n_heads + dm.n_kv_heads) {
    const size_t h = job - dm.n_heads;
    float* z = k + t * row + h * d;
    norm_rope_head(z, k_norm, dm, cos_s, sin_s, lane);
    __syncwarp();  // the write reads every lane's roped values
    write_head(pools.k_type, pools.k_data_bytes, z, pools.k + size_t{kv_rows[t]} * pools.k_row_bytes, h, d, lane,
               pools.inv_sqrt_d);
  } else if (job < dm.n_heads + 2 * dm.n_kv_heads) {
    const size_t h = job - dm.n_heads - dm.n_kv_heads;
    write_head(pools.v_type, pools.v_data_bytes, v + t * row + h * d, pools.v + size_t{kv_rows[t]} * pools.v_row_bytes,
               h, d, lane, pools.inv_sqrt_d);
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
  if ((kv_type_has_scales(p.k_type) || kv_type_has_scales(p.v_type)) && p.head_dim > kMaxChunks * kKvQuantBlock) {
    return cudaErrorNotSupported;
  }
  if (p.n_rot / 2 > kMaxRopeHalf || p.n_tokens > detail::kMaxGridX) return cudaErrorInvalidValue;
  if (!all_f32_aligned(p)) return cudaErrorMisalignedAddress;
  const size_t jobs = p.n_heads + 2 * p.n_kv_heads;
  const size_t groups = (jobs + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (groups > 65535) return cudaErrorInvalidValue;  // grid.y limit
  const PrepDims dm{p.n_tokens, p.n_heads, p.n_kv_heads, p.head_dim, p.q_head_stride, p.n_rot / 2, p.eps};
  const RopeTable tab = detail::make_rope_table(p.n_rot, p.sections, p.theta);
  const size_t row = p.kv_row_floats();
  const PrepPools pools{static_cast<uint8_t*>(p.k_pool),
                        static_cast<uint8_t*>(p.v_pool),
                        p.k_type,
                        p.v_type,
                        kv_row_bytes(p.k_type, row),
                        kv_row_bytes(p.v_type, row),
                        kv_data_bytes(p.k_type, row),
                        kv_data_bytes(p.v_type, row),
                        1.0f / std::sqrt(static_cast<float>(p.head_dim))};
  const dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>(groups));
  return detail::launch_dependent_if_enabled(attention_prep_kernel, grid, dim3(kThreads), 0, stream, p.qg, p.k, p.v,
                                             p.q_norm, p.k_norm, p.positions, p.kv_rows, pools, dm, tab);
}

}  // namespace ds::cuda
