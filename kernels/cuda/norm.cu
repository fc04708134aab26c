#include <cooperative_groups.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/norm_rope.cuh"

namespace ds::cuda {
namespace {

using detail::kWarp;

// One warp per row: rows are short (head dims 32..256, hidden up to ~8k) and independent, so a
// warp keeps the reduction in registers and needs no shared memory or block barrier.
constexpr int kRowsPerBlock = 4;

// Row index of this warp, or n_rows when the warp has nothing to do.
__device__ __forceinline__ size_t warp_row(size_t n_rows) {
  const size_t row = size_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / kWarp;
  return row < n_rows ? row : n_rows;
}

using detail::row_sum_squares;  // norm_rope.cuh: shared with the fused attention prep

// Every kernel here may run as a programmatic dependent launch (common.cuh
// launch_dependent_if_enabled): each thread calls wait_for_previous_kernel() before it reads an
// activation or writes anything, and before any early return; only norm weights are read before.

// Each lane reads and writes only its own indices, so y == x is safe.
__global__ void rms_norm_kernel(const float* x, size_t xs, const float* w, float eps, size_t n_rows, size_t dim,
                                float* y, size_t ys) {
  detail::wait_for_previous_kernel();
  const size_t row = warp_row(n_rows);
  if (row == n_rows) return;
  detail::warp_rms_norm_row(x + row * xs, w, eps, dim, y + row * ys, threadIdx.x % kWarp);
}

// The first kGatedPreload gains of each lane are read before the wait (head dims up to 128 have
// all theirs in registers when the previous kernel's data arrives); same arithmetic either way.
constexpr int kGatedPreload = 4;

__global__ void gated_rms_norm_kernel(const float* o, const float* z, const float* w, float eps, size_t n_rows,
                                      size_t dim, float* y) {
  const unsigned lane = threadIdx.x % kWarp;
  float wp[kGatedPreload];
#pragma unroll
  for (int j = 0; j < kGatedPreload; ++j) {
    const size_t i = lane + size_t{kWarp} * j;
    wp[j] = i < dim ? w[i] : 0.0f;
  }
  detail::wait_for_previous_kernel();
  const size_t row = warp_row(n_rows);
  if (row == n_rows) return;
  const float* orow = o + row * dim;
  const float* zrow = z + row * dim;
  float* yr = y + row * dim;
  const float mean_sq = row_sum_squares(orow, dim, lane) / static_cast<float>(dim);
  const float s = 1.0f / sqrtf(mean_sq + eps);
  size_t i = lane;
#pragma unroll
  for (int j = 0; j < kGatedPreload; ++j, i += kWarp) {
    if (i < dim) yr[i] = ((orow[i] * s) * wp[j]) * detail::silu(zrow[i]);
  }
  for (; i < dim; i += kWarp) yr[i] = ((orow[i] * s) * w[i]) * detail::silu(zrow[i]);
}

__global__ void l2_norm_kernel(const float* x, size_t xs, float eps, size_t n_rows, size_t dim, float* y, size_t ys) {
  detail::wait_for_previous_kernel();
  const size_t row = warp_row(n_rows);
  if (row == n_rows) return;
  const unsigned lane = threadIdx.x % kWarp;
  const float* xr = x + row * xs;
  float* yr = y + row * ys;
  const float s = 1.0f / sqrtf(row_sum_squares(xr, dim, lane) + eps);
  for (size_t i = lane; i < dim; i += kWarp) yr[i] = xr[i] * s;
}

// ---- wide rows (dim >= kWideMinDim): a block per row ----------------------------------------------
// A lone warp walking a 4096-wide row issues one 128-byte load after another; at decode (one row
// per call: the block norms, the LM-head norm) that made the rms_norms a large share of a 9B decode
// step (docs/history/performance-2026-11.md). A block of 256 threads has every load of the row
// in flight at once.
constexpr int kWideThreads = 256;
constexpr size_t kWideMinDim = 1024;

// Sum of v over the whole block: f32 warp trees, then every thread adds the 8 warp sums in the
// same order (so all threads hold the same value).
__device__ __forceinline__ float block_total(float v) {
  __shared__ float warp_part[kWideThreads / kWarp];
  v = detail::warp_sum(v);
  if (threadIdx.x % kWarp == 0) warp_part[threadIdx.x / kWarp] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kWideThreads / kWarp; ++k) total += warp_part[k];
  return total;
}

// Sum of squares of one row over the whole block: f32 thread partials, then block_total.
__device__ float block_sum_squares(const float* x, size_t dim) {
  float s = 0.0f;
#pragma unroll 8
  for (size_t i = threadIdx.x; i < dim; i += kWideThreads) s += x[i] * x[i];
  return block_total(s);
}

// Each thread reads and writes only its own indices, so y == x is safe.
__global__ void __launch_bounds__(kWideThreads)
    rms_norm_wide_kernel(const float* x, size_t xs, const float* w, float eps, size_t dim, float* y, size_t ys) {
  detail::wait_for_previous_kernel();
  const float* xr = x + size_t{blockIdx.x} * xs;
  float* yr = y + size_t{blockIdx.x} * ys;
  const float s = 1.0f / sqrtf(block_sum_squares(xr, dim) / static_cast<float>(dim) + eps);
  for (size_t i = threadIdx.x; i < dim; i += kWideThreads) yr[i] = w != nullptr ? (xr[i] * s) * w[i] : xr[i] * s;
}

__global__ void __launch_bounds__(kWideThreads)
    gated_rms_norm_wide_kernel(const float* o, const float* z, const float* w, float eps, size_t dim, float* y) {
  detail::wait_for_previous_kernel();
  const size_t row = blockIdx.x;
  const float* orow = o + row * dim;
  const float* zrow = z + row * dim;
  float* yr = y + row * dim;
  const float s = 1.0f / sqrtf(block_sum_squares(orow, dim) / static_cast<float>(dim) + eps);
  for (size_t i = threadIdx.x; i < dim; i += kWideThreads) yr[i] = ((orow[i] * s) * w[i]) * detail::silu(zrow[i]);
}

__global__ void __launch_bounds__(kWideThreads)
    l2_norm_wide_kernel(const float* x, size_t xs, float eps, size_t dim, float* y, size_t ys) {
  detail::wait_for_previous_kernel();
  const float* xr = x + size_t{blockIdx.x} * xs;
  float* yr = y + size_t{blockIdx.x} * ys;
  const float s = 1.0f / sqrtf(block_sum_squares(xr, dim) + eps);
  for (size_t i = threadIdx.x; i < dim; i += kWideThreads) yr[i] = xr[i] * s;
}

// ---- LayerNorm (the vision tower): the same row layouts, a warp or a block per row -------------
// Two f32 passes: the mean, then the squared deviations from it (no E[x^2] - mean^2 cancellation).
// Each thread reads and writes only its own indices, so y == x is safe.
__device__ __forceinline__ float layer_norm_value(float x, float mean, float rstd, const float* w, const float* b,
                                                  size_t i) {
  float v = (x - mean) * rstd;
  if (w != nullptr) v *= w[i];
  if (b != nullptr) v += b[i];
  return v;
}

__global__ void layer_norm_kernel(const float* x, size_t xs, const float* w, const float* b, float eps, size_t n_rows,
                                  size_t dim, float* y, size_t ys) {
  detail::wait_for_previous_kernel();
  const size_t row = warp_row(n_rows);
  if (row == n_rows) return;
  const unsigned lane = threadIdx.x % kWarp;
  const float* xr = x + row * xs;
  float* yr = y + row * ys;
  float sum = 0.0f;
  for (size_t i = lane; i < dim; i += kWarp) sum += xr[i];
  const float mean = detail::warp_sum(sum) / static_cast<float>(dim);
  float dev = 0.0f;
  for (size_t i = lane; i < dim; i += kWarp) dev += (xr[i] - mean) * (xr[i] - mean);
  const float rstd = 1.0f / sqrtf(detail::warp_sum(dev) / static_cast<float>(dim) + eps);
  for (size_t i = lane; i < dim; i += kWarp) yr[i] = layer_norm_value(xr[i], mean, rstd, w, b, i);
}

__global__ void __launch_bounds__(kWideThreads)
    layer_norm_wide_kernel(const float* x, size_t xs, const float* w, const float* b, float eps, size_t dim, float* y,
                           size_t ys) {
  detail::wait_for_previous_kernel();
  const float* xr = x + size_t{blockIdx.x} * xs;
  float* yr = y + size_t{blockIdx.x} * ys;
  float sum = 0.0f;
  for (size_t i = threadIdx.x; i < dim; i += kWideThreads) sum += xr[i];
  const float mean = block_total(sum) / static_cast<float>(dim);
  __syncthreads();  // block_total's shared partials are written again below: every thread has read them
  float dev = 0.0f;
  for (size_t i = threadIdx.x; i < dim; i += kWideThreads) dev += (xr[i] - mean) * (xr[i] - mean);
  const float rstd = 1.0f / sqrtf(block_total(dev) / static_cast<float>(dim) + eps);
  for (size_t i = threadIdx.x; i < dim; i += kWideThreads) yr[i] = layer_norm_value(xr[i], mean, rstd, w, b, i);
}

// x += delta, then y = rms_norm(x): a block per row for every width (the decode rows are
// 4096-5120 wide; the prefill rows as many blocks). Every load of a thread's part of the row is
// issued before its first store: x, delta and y may alias (y == delta is allowed), so a loop that
// stores x[i] before loading x[i + 256] makes the compiler keep the loads in order, one L2 round
// trip after another (a visible share of a 9B decode step: docs/history/performance-2026-11.md, session 3).
// Same arithmetic and order as the loop it replaces. Rows wider than kWideThreads *
// kAddNormPerThread take the loop.
constexpr int kAddNormPerThread = 32;  // rows up to 8192 wide held in registers

__global__ void __launch_bounds__(kWideThreads)
    add_rms_norm_kernel(float* x, const float* delta, const float* w, float eps, size_t dim, float* y) {
  detail::wait_for_previous_kernel();
  const size_t row = blockIdx.x;
  float* xr = x + row * dim;
  const float* dr = delta + row * dim;
  float* yr = y + row * dim;
  float sq = 0.0f;
  if (dim <= size_t{kWideThreads} * kAddNormPerThread) {
    float v[kAddNormPerThread];
#pragma unroll
    for (int j = 0; j < kAddNormPerThread; ++j) {
      const size_t i = threadIdx.x + size_t{kWideThreads} * j;
      v[j] = i < dim ? xr[i] + dr[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kAddNormPerThread; ++j) {
      const size_t i = threadIdx.x + size_t{kWideThreads} * j;
      if (i < dim) {
        xr[i] = v[j];
        sq += v[j] * v[j];
      }
    }
    const float s = 1.0f / sqrtf(block_total(sq) / static_cast<float>(dim) + eps);
#pragma unroll
    for (int j = 0; j < kAddNormPerThread; ++j) {
      const size_t i = threadIdx.x + size_t{kWideThreads} * j;
      if (i < dim) yr[i] = w != nullptr ? (v[j] * s) * w[i] : v[j] * s;
    }
    return;
  }
  for (size_t i = threadIdx.x; i < dim; i += kWideThreads) {
    const float v = xr[i] + dr[i];
    xr[i] = v;
    sq += v * v;
  }
  const float s = 1.0f / sqrtf(block_total(sq) / static_cast<float>(dim) + eps);
  for (size_t i = threadIdx.x; i < dim; i += kWideThreads) yr[i] = w != nullptr ? (xr[i] * s) * w[i] : xr[i] * s;
}

// Narrow rows (dim < kWideMinDim): x += delta, then the exact sums and scaling of rms_norm_kernel
// (one warp per row, same lane order), so a fused step gives the bits of the separate add and
// rms_norm. A layer split falls back to the separate ops at the stage boundary; with equal bits the
// logits do not depend on where the model is split.
__global__ void add_rms_norm_rows_kernel(float* x, const float* delta, const float* w, float eps, size_t n_rows,
                                         size_t dim, float* y) {
  detail::wait_for_previous_kernel();
  const size_t row = warp_row(n_rows);
  if (row == n_rows) return;
  const unsigned lane = threadIdx.x % kWarp;
  float* xr = x + row * dim;
  const float* dr = delta + row * dim;
  float* yr = y + row * dim;
  for (size_t i = lane; i < dim; i += kWarp) xr[i] = xr[i] + dr[i];
  const float mean_sq = row_sum_squares(xr, dim, lane) / static_cast<float>(dim);
  const float s = 1.0f / sqrtf(mean_sq + eps);
  for (size_t i = lane; i < dim; i += kWarp) yr[i] = w != nullptr ? (xr[i] * s) * w[i] : xr[i] * s;
}

// Shared argument checks of the strided row ops.
// ---- wide decode rows on sm_90+: a cluster of 8 blocks per row -----------------------------------
// One 256-thread block per 4096-wide row is still latency-bound, and a decode step has 63 of them
// (measured: docs/history/performance-2026-11.md, session 3). A thread-block cluster spreads a
// row over kClusterBlocks SMs; the blocks' sums meet in distributed shared memory and every block
// adds them in rank order, so all hold the same total. rms_norm and add_rms_norm take this path
// under the same condition (cluster_rows), so a fused step and the separate add + norm at a
// stage boundary still give the same bits.
constexpr unsigned kClusterBlocks = 8, kClusterThreads = 128, kClusterPerThread = 8;
constexpr size_t kClusterStride = size_t{kClusterBlocks} * kClusterThreads;
constexpr size_t kClusterMaxRows = 64;  // decode-sized steps; prefill rows keep a block each

// kAdd: x += delta (x rows contiguous, written back), then y = rms_norm(x); else y = rms_norm(x).
template <bool kAdd>
__global__ void __launch_bounds__(kClusterThreads)
    norm_cluster_kernel(float* x, size_t xs, const float* delta, const float* w, float eps, size_t dim, float* y,
                        size_t ys) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float warp_part[kClusterThreads / kWarp];
  __shared__ float block_part;
  const size_t row = blockIdx.x / kClusterBlocks;
  const size_t t0 = size_t{cluster.block_rank()} * kClusterThreads + threadIdx.x;
  float* xr = x + row * xs;
  float* yr = y + row * ys;
  float gain[kClusterPerThread];  // the norm weights: read before the wait (no kernel writes them)
#pragma unroll
  for (unsigned j = 0; j < kClusterPerThread; ++j) {
    const size_t i = t0 + j * kClusterStride;
    gain[j] = w != nullptr && i < dim ? w[i] : 1.0f;
  }
  detail::wait_for_previous_kernel();
  float v[kClusterPerThread];
#pragma unroll
  for (unsigned j = 0; j < kClusterPerThread; ++j) {  // every load before any store (x, delta, y may alias)
    const size_t i = t0 + j * kClusterStride;
    v[j] = i < dim ? (kAdd ? xr[i] + delta[row * xs + i] : xr[i]) : 0.0f;
  }
  float sq = 0.0f;
#pragma unroll
  for (unsigned j = 0; j < kClusterPerThread; ++j) {
    const size_t i = t0 + j * kClusterStride;
    if (i < dim) {
      if (kAdd) xr[i] = v[j];
      sq += v[j] * v[j];
    }
  }
  sq = detail::warp_sum(sq);
  if (threadIdx.x % kWarp == 0) warp_part[threadIdx.x / kWarp] = sq;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = 0.0f;
#pragma unroll
    for (unsigned k = 0; k < kClusterThreads / kWarp; ++k) b += warp_part[k];
    block_part = b;
  }
  cluster.sync();
  float total = 0.0f;
#pragma unroll
  for (unsigned r = 0; r < kClusterBlocks; ++r) total += *cluster.map_shared_rank(&block_part, r);
  cluster.sync();  // no block may exit (its shared memory gone) while another still reads it
  const float s = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);
#pragma unroll
  for (unsigned j = 0; j < kClusterPerThread; ++j) {
    const size_t i = t0 + j * kClusterStride;
    if (i < dim) yr[i] = w != nullptr ? (v[j] * s) * gain[j] : v[j] * s;
  }
#endif
}

bool cluster_rows(size_t n_rows, size_t dim) {
  return n_rows <= kClusterMaxRows && dim >= kWideMinDim && dim <= kClusterStride * kClusterPerThread &&
         current_device_is_sm90_or_newer();  // thread-block clusters
}

template <bool kAdd>
cudaError_t launch_norm_cluster(float* x, size_t xs, const float* delta, const float* w, float eps, size_t n_rows,
                                size_t dim, float* y, size_t ys, cudaStream_t stream) {
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = kClusterBlocks;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  return detail::launch_maybe_dependent_with(
      norm_cluster_kernel<kAdd>, dim3(static_cast<unsigned>(n_rows * kClusterBlocks)), dim3(kClusterThreads), 0, stream,
      dependent_launches(stream), &cluster, x, xs, delta, w, eps, dim, y, ys);
}

cudaError_t check_rows(const float* x, size_t xs, const float* y, size_t ys, size_t n_rows, size_t dim) {
  if (x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  if (!detail::aligned_to(x, 4) || !detail::aligned_to(y, 4)) return cudaErrorMisalignedAddress;
  if (xs < dim || ys < dim) return cudaErrorInvalidValue;
  if (n_rows > detail::kMaxGridX) return cudaErrorInvalidValue;  // the wide path launches a block per row
  return cudaSuccess;
}

unsigned row_blocks(size_t n_rows) {
  return static_cast<unsigned>((n_rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

cudaError_t rms_norm(const float* x, size_t x_stride, const float* w, float eps, size_t n_rows, size_t dim, float* y,
                     size_t y_stride, cudaStream_t stream) {
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (const cudaError_t e = check_rows(x, x_stride, y, y_stride, n_rows, dim); e != cudaSuccess) return e;
  if (w != nullptr && !detail::aligned_to(w, 4)) return cudaErrorMisalignedAddress;
  if (cluster_rows(n_rows, dim)) {  // x is only read here (kAdd false)
    return launch_norm_cluster<false>(const_cast<float*>(x), x_stride, nullptr, w, eps, n_rows, dim, y, y_stride,
                                      stream);
  }
  if (dim >= kWideMinDim) {
    return detail::launch_dependent_if_enabled(rms_norm_wide_kernel, dim3(static_cast<unsigned>(n_rows)),
                                               dim3(kWideThreads), 0, stream, x, x_stride, w, eps, dim, y, y_stride);
  }
  return detail::launch_dependent_if_enabled(rms_norm_kernel, dim3(row_blocks(n_rows)), dim3(kRowsPerBlock * kWarp), 0,
                                             stream, x, x_stride, w, eps, n_rows, dim, y, y_stride);
}

cudaError_t gated_rms_norm(const float* o, const float* z, const float* w, float eps, size_t n_rows, size_t dim,
                           float* y, cudaStream_t stream) {
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (const cudaError_t e = check_rows(o, dim, y, dim, n_rows, dim); e != cudaSuccess) return e;
  if (z == nullptr || w == nullptr) return cudaErrorInvalidValue;
  if (!detail::f32_ok(z) || !detail::f32_ok(w)) return cudaErrorMisalignedAddress;
  if (dim >= kWideMinDim) {
    return detail::launch_dependent_if_enabled(gated_rms_norm_wide_kernel, dim3(static_cast<unsigned>(n_rows)),
                                               dim3(kWideThreads), 0, stream, o, z, w, eps, dim, y);
  }
  return detail::launch_dependent_if_enabled(gated_rms_norm_kernel, dim3(row_blocks(n_rows)),
                                             dim3(kRowsPerBlock * kWarp), 0, stream, o, z, w, eps, n_rows, dim, y);
}

cudaError_t add_rms_norm(float* x, const float* delta, const float* w, float eps, size_t n_rows, size_t dim, float* y,
                         cudaStream_t stream) {
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (const cudaError_t e = check_rows(x, dim, y, dim, n_rows, dim); e != cudaSuccess) return e;
  if (delta == nullptr || y == x) return cudaErrorInvalidValue;
  if (!detail::f32_ok(delta) || (w != nullptr && !detail::aligned_to(w, 4))) return cudaErrorMisalignedAddress;
  if (cluster_rows(n_rows, dim)) return launch_norm_cluster<true>(x, dim, delta, w, eps, n_rows, dim, y, dim, stream);
  if (dim >= kWideMinDim) {  // same block reduction as rms_norm_wide_kernel
    return detail::launch_dependent_if_enabled(add_rms_norm_kernel, dim3(static_cast<unsigned>(n_rows)),
                                               dim3(kWideThreads), 0, stream, x, delta, w, eps, dim, y);
  }
  return detail::launch_dependent_if_enabled(add_rms_norm_rows_kernel, dim3(row_blocks(n_rows)),
                                             dim3(kRowsPerBlock * kWarp), 0, stream, x, delta, w, eps, n_rows, dim, y);
}

cudaError_t layer_norm(const float* x, size_t x_stride, const float* w, const float* b, float eps, size_t n_rows,
                       size_t dim, float* y, size_t y_stride, cudaStream_t stream) {
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (const cudaError_t e = check_rows(x, x_stride, y, y_stride, n_rows, dim); e != cudaSuccess) return e;
  if ((w != nullptr && !detail::aligned_to(w, 4)) || (b != nullptr && !detail::aligned_to(b, 4))) {
    return cudaErrorMisalignedAddress;
  }
  if (dim >= kWideMinDim) {
    return detail::launch_dependent_if_enabled(layer_norm_wide_kernel, dim3(static_cast<unsigned>(n_rows)),
                                               dim3(kWideThreads), 0, stream, x, x_stride, w, b, eps, dim, y, y_stride);
  }
  return detail::launch_dependent_if_enabled(layer_norm_kernel, dim3(row_blocks(n_rows)), dim3(kRowsPerBlock * kWarp),
                                             0, stream, x, x_stride, w, b, eps, n_rows, dim, y, y_stride);
}

cudaError_t l2_norm(const float* x, size_t x_stride, float eps, size_t n_rows, size_t dim, float* y, size_t y_stride,
                    cudaStream_t stream) {
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (const cudaError_t e = check_rows(x, x_stride, y, y_stride, n_rows, dim); e != cudaSuccess) return e;
  if (dim >= kWideMinDim) {
    return detail::launch_dependent_if_enabled(l2_norm_wide_kernel, dim3(static_cast<unsigned>(n_rows)),
                                               dim3(kWideThreads), 0, stream, x, x_stride, eps, dim, y, y_stride);
  }
  return detail::launch_dependent_if_enabled(l2_norm_kernel, dim3(row_blocks(n_rows)), dim3(kRowsPerBlock * kWarp), 0,
                                             stream, x, x_stride, eps, n_rows, dim, y, y_stride);
}

}  // namespace ds::cuda
