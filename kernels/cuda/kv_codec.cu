#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/kv_codec.h"

namespace ds::cuda {
namespace {

using detail::kWarp;
constexpr int kWarpsPerBlock = 8;
constexpr int kMaxChunks = 8;  // heads of up to 256 values in registers

// One warp per row.
__global__ void kv_write_kernel(KvType t, const float* src, size_t src_stride, const uint32_t* rows, size_t n_rows,
                                size_t n, uint8_t* pool) {
  const size_t r = size_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (r >= n_rows) return;
  const float* x = src + r * src_stride;
  uint8_t* row = pool + size_t{rows[r]} * kv_row_bytes(t, n);
  if (kv_type_has_scales(t)) {
    for (size_t c = 0; c < n / kKvQuantBlock; ++c) {
      detail::warp_encode_chunk(t, x[c * kKvQuantBlock + lane], row, kv_data_bytes(t, n), c, lane);
    }
    return;
  }
  for (size_t i = lane; i < n; i += kWarp) {
    switch (t) {
      case KvType::kF32:
        reinterpret_cast<float*>(row)[i] = x[i];
        break;
      case KvType::kBf16:
        reinterpret_cast<uint16_t*>(row)[i] = kv_encode_bf16(x[i]);
        break;
      case KvType::kF16:
        reinterpret_cast<uint16_t*>(row)[i] = kv_encode_f16(x[i]);
        break;
      default:
        row[i] = kv_encode_fp8(x[i]);
        break;
    }
  }
}

// One warp per (row, head).
__global__ void hadamard_kernel(float* x, size_t n_rows, size_t row_stride, size_t n_heads, size_t head_stride,
                                size_t head_dim, float inv) {
  const size_t job = size_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (job >= n_rows * n_heads) return;
  float* z = x + (job / n_heads) * row_stride + (job % n_heads) * head_stride;
  const int n_e = static_cast<int>(head_dim / kWarp);
  float v[kMaxChunks];
#pragma unroll
  for (int e = 0; e < kMaxChunks; ++e) v[e] = e < n_e ? z[lane + kWarp * e] : 0.0f;
  detail::warp_hadamard(v, n_e, lane, inv);
#pragma unroll
  for (int e = 0; e < kMaxChunks; ++e) {
    if (e < n_e) z[lane + kWarp * e] = v[e];
  }
}

unsigned blocks_for(size_t warps) {
  return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

cudaError_t kv_write_rows(KvType t, const float* src, size_t src_stride, const uint32_t* rows, size_t n_rows, size_t n,
                          void* pool, cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  if (src == nullptr || rows == nullptr || pool == nullptr || n == 0) return cudaErrorInvalidValue;
  if (kv_type_has_scales(t) && n % kKvQuantBlock != 0) return cudaErrorInvalidValue;
  if (blocks_for(n_rows) > detail::kMaxGridX) return cudaErrorInvalidValue;
  kv_write_kernel<<<blocks_for(n_rows), kWarpsPerBlock * kWarp, 0, stream>>>(t, src, src_stride, rows, n_rows, n,
                                                                             static_cast<uint8_t*>(pool));
  return detail::launch_status();
}

cudaError_t hadamard_heads(float* x, size_t n_rows, size_t row_stride, size_t n_heads, size_t head_stride,
                           size_t head_dim, cudaStream_t stream) {
  if (n_rows == 0 || n_heads == 0) return cudaSuccess;
  if (x == nullptr) return cudaErrorInvalidValue;
  if (head_dim < kWarp || head_dim > kMaxChunks * kWarp || (head_dim & (head_dim - 1)) != 0) {
    return cudaErrorNotSupported;
  }
  if (blocks_for(n_rows * n_heads) > detail::kMaxGridX) return cudaErrorInvalidValue;
  const float inv = 1.0f / std::sqrt(static_cast<float>(head_dim));
  hadamard_kernel<<<blocks_for(n_rows * n_heads), kWarpsPerBlock * kWarp, 0, stream>>>(x, n_rows, row_stride, n_heads,
                                                                                       head_stride, head_dim, inv);
  return detail::launch_status();
}

}  // namespace ds::cuda
