// Internal: the kernels and launchers of the small-batch bf16 GEMM over split rows
// (gemm_q8_split_small.cu explains them), shared by production (gemm_q8_split_small.cu: the launch
// variant picked by the token count) and the kernel lab (tools/kernel_lab/split_small_variants.cu:
// either variant for any count). Each includer gets its own copy.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/matmul_fast.h"
#include "kernels/cuda/ptx_mma.cuh"
#include "kernels/cuda/q8_span_fragments.cuh"
#include "kernels/cuda/split_small_common.cuh"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * kWarp;
constexpr int kWarpRows = 32;                   // two m16 tiles
constexpr int kBlockRows = kWarps * kWarpRows;  // 256
constexpr int kSpanCols = 64;                   // one 16-byte load per lane per row
constexpr int kSplitUnitCols = 256;             // K splits are whole units (any ring size divides it)
constexpr int kStages = 3;                      // activation slices in shared memory
constexpr int kMaxSplits = 16;
constexpr int kMaxTiles = static_cast<int>(kSplitSmallMaxTokens) / 8;
static_assert(kBlockRows == kSplitSmallBlockRows && kSpanCols == kSplitSmallSpanCols &&
                  kSplitUnitCols == kSplitSmallUnitCols,
              "split_small_common.cuh describes this kernel's tiling");

// Bytes of one token's row of a staged slice of R spans: 2 bytes per column plus 16, so the two
// tokens a quarter-warp reads (rows t, t + 1) fall on disjoint banks.
template <int R>
constexpr int act_row_bytes() {
  return R * kSpanCols * 2 + 16;
}
template <int NT, int R>
constexpr size_t stage_bytes() {
  return static_cast<size_t>(NT) * 8 * act_row_bytes<R>();
}

// row_ptr[i]: start of row (warp row + g + 8 i) (clamped into the matrix; never stored).
__device__ __forceinline__ void load_span(const uint8_t* const (&row_ptr)[4], int cols, int span, int c,
                                          SpanWeights& s) {
  const int col = span * kSpanCols + 16 * c;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s.q[i] = __ldcs(reinterpret_cast<const uint4*>(row_ptr[i] + col));
    s.d[i] = __ldcs(reinterpret_cast<const unsigned short*>(row_ptr[i] + cols + 2 * (col / 32)));
  }
}

// One span against every token tile: act points at the span's first column of token 0's staged row.
template <int NT, int R>
__device__ __forceinline__ void compute_span(const SpanWeights& s, const uint8_t* act, int g, int c,
                                             float (&acc)[2][NT][4]) {
  uint32_t a[2][4][4];
  span_fragments(s, a);
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const uint8_t* p = act + (8 * j + g) * act_row_bytes<R>() + 32 * c;
    const uint4 lo = *reinterpret_cast<const uint4*>(p);
    const uint4 hi = *reinterpret_cast<const uint4*>(p + 16);
    const uint32_t b[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) ptx::mma_bf16(acc[mt][j], a[mt][ks], b[2 * ks], b[2 * ks + 1]);
    }
  }
}

// Stages slice `slice` (R spans from column col0) of every token into `dst`: 16-byte cp.async
// chunks of the bf16 activations; tokens >= n are zero-filled.
template <int NT, int R>
__device__ __forceinline__ void stage_slice(const __nv_bfloat16* __restrict__ xb, int cols, int n, int col0,
                                            uint8_t* dst) {
  constexpr int kChunksPerRow = R * kSpanCols * 2 / 16;
  for (int chunk = static_cast<int>(threadIdx.x); chunk < NT * 8 * kChunksPerRow; chunk += kThreads) {
    const int t = chunk / kChunksPerRow, part = chunk % kChunksPerRow;
    const bool valid = t < n;
    const auto* src =
        reinterpret_cast<const uint8_t*>(xb + static_cast<size_t>(valid ? t : 0) * cols + col0) + 16 * part;
    ptx::cp_async16(ptx::smem_u32(dst + t * act_row_bytes<R>() + 16 * part), src, valid);
  }
}

// Where a thread works: its warp, its lane's row group g and column quarter c, and the block's K
// range (split blockIdx.y: spans from first_span, n_slices slices of spans_per_slice spans).
struct BlockTile {
  int warp, g, c, first_span, n_slices;
};
__device__ __forceinline__ BlockTile block_tile(int cols, int spans_per_split, int spans_per_slice) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int first_span = static_cast<int>(blockIdx.y) * spans_per_split;
  const int n_slices = (min(cols / kSpanCols, first_span + spans_per_split) - first_span) / spans_per_slice;
  return {static_cast<int>(threadIdx.x) / kWarp, lane / 4, lane % 4, first_span, n_slices};
}

// The product for this block's rows and K range, to the Destination.
template <int NT, int R, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    gemm_q8_split_small_kernel(const uint8_t* __restrict__ w, int rows, int cols, size_t row_bytes,
                               const __nv_bfloat16* __restrict__ xb, int n, int spans_per_split, Destination dest) {
  extern __shared__ __align__(16) uint8_t stages[];
  const BlockTile tile = block_tile(cols, spans_per_split, R);
  const int warp = tile.warp, g = tile.g, c = tile.c, first_span = tile.first_span, n_slices = tile.n_slices;
  const int warp_row = static_cast<int>(blockIdx.x) * kBlockRows + warp * kWarpRows;
  const uint8_t* row_ptr[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) row_ptr[i] = w + static_cast<size_t>(min(warp_row + g + 8 * i, rows - 1)) * row_bytes;
  const auto slice_col = [&](int slice) { return (first_span + slice * R) * kSpanCols; };
  const auto stage = [&](int slice) { return stages + (slice % kStages) * stage_bytes<NT, R>(); };

  SpanWeights ring[R];
  if (n_slices > 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) load_span(row_ptr, cols, first_span + r, c, ring[r]);
  }
  wait_for_previous_kernel();  // the weights never change; xb and out may be the previous kernel's
#pragma unroll
  for (int p = 0; p < kStages - 1; ++p) {
    if (p < n_slices) stage_slice<NT, R>(xb, cols, n, slice_col(p), stage(p));
    ptx::cp_async_commit();
  }

  float acc[2][NT][4] = {};
  for (int i = 0; i < n_slices; ++i) {
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();  // slice i is staged for everyone; slice i - 1's buffer is free again
    const int ahead = i + kStages - 1;
    if (ahead < n_slices) stage_slice<NT, R>(xb, cols, n, slice_col(ahead), stage(ahead));
    ptx::cp_async_commit();
    const uint8_t* act = stage(i);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      compute_span<NT, R>(ring[r], act + r * kSpanCols * 2, g, c, acc);
      if (i + 1 < n_slices) load_span(row_ptr, cols, first_span + (i + 1) * R + r, c, ring[r]);
    }
  }

  store_acc<NT>(acc, warp_row, g, c, rows, n, dest);
}

// ---- Variant 1: the weights staged in shared memory too ----
// Each stage holds one 128-column slice of the block's 256 rows (16-byte chunks; chunk j of row r
// at position j ^ 4 (r & 1), so the two rows a quarter-warp reads fall on disjoint banks), their
// 4 block scales per row, and the activations. kWStages stages: three slices of weights are in
// flight per SM while one is computed, whatever the register budget.
constexpr int kWStages = 4;
constexpr int kSliceCols = 2 * kSpanCols;
constexpr int kSliceScaleBytes = kSliceCols / 32 * 2;  // 4 fp16 per row

template <int NT>
struct WStage {
  static constexpr int kWeights = kBlockRows * kSliceCols;
  static constexpr int kScales = kBlockRows * kSliceScaleBytes;
  static constexpr int kBytes = kWeights + kScales + NT * 8 * act_row_bytes<2>();
};

__device__ __forceinline__ int swizzled_chunk(int row, int chunk) {
  return chunk ^ ((row & 1) << 2);
}

template <int NT>
__device__ __forceinline__ void stage_weights(const uint8_t* __restrict__ w, int rows, int cols, size_t row_bytes,
                                              int row0, int col0, uint8_t* dst) {
  constexpr int kChunks = kBlockRows * kSliceCols / 16;
#pragma unroll
  for (int k = 0; k < kChunks / kThreads; ++k) {
    const int q = static_cast<int>(threadIdx.x) + k * kThreads, r = q / 8, j = q % 8;
    const uint8_t* row = w + static_cast<size_t>(min(row0 + r, rows - 1)) * row_bytes;
    ptx::cp_async16(ptx::smem_u32(dst + r * kSliceCols + 16 * swizzled_chunk(r, j)), row + col0 + 16 * j, true);
  }
  static_assert(kBlockRows == kThreads, "one thread stages each row's scale group");
  static_assert(kBlockRows * kSliceCols / 16 % kThreads == 0, "whole weight chunks per thread");
  const int r = static_cast<int>(threadIdx.x);  // one 8-byte scale group per row
  const uint8_t* row = w + static_cast<size_t>(min(row0 + r, rows - 1)) * row_bytes;
  ptx::cp_async8(ptx::smem_u32(dst + WStage<NT>::kWeights + r * kSliceScaleBytes), row + cols + col0 / 16);
}

// The lane's share of span m of a staged slice (rows warp_row + g + 8 i, block-relative).
__device__ __forceinline__ void span_from_stage(const uint8_t* weights, const uint8_t* scales, int warp_row, int g,
                                                int c, int m, SpanWeights& s) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = warp_row + g + 8 * i;
    s.q[i] = *reinterpret_cast<const uint4*>(weights + r * kSliceCols + 16 * swizzled_chunk(r, 4 * m + c));
    s.d[i] = *reinterpret_cast<const uint16_t*>(scales + r * kSliceScaleBytes + 2 * (2 * m + c / 2));
  }
}

template <int NT>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_q8_split_staged_kernel(const uint8_t* __restrict__ w, int rows, int cols, size_t row_bytes,
                                const __nv_bfloat16* __restrict__ xb, int n, int spans_per_split, Destination dest) {
  extern __shared__ __align__(16) uint8_t stages[];
  const BlockTile tile = block_tile(cols, spans_per_split, 2);
  const int g = tile.g, c = tile.c, first_span = tile.first_span, n_slices = tile.n_slices;
  const int row0 = static_cast<int>(blockIdx.x) * kBlockRows, warp_row = tile.warp * kWarpRows;
  const auto stage = [&](int slice) { return stages + (slice % kWStages) * WStage<NT>::kBytes; };
  const auto col0 = [&](int slice) { return (first_span + 2 * slice) * kSpanCols; };
  const auto load_weights = [&](int slice) {
    stage_weights<NT>(w, rows, cols, row_bytes, row0, col0(slice), stage(slice));
  };
  const auto load_acts = [&](int slice) {
    stage_slice<NT, 2>(xb, cols, n, col0(slice), stage(slice) + WStage<NT>::kWeights + WStage<NT>::kScales);
  };
  // The first stages' weights go out before the wait (they never change; xb and out may be the
  // previous kernel's): they travel in the first commit group, with the first activations.
#pragma unroll
  for (int p = 0; p < kWStages - 1; ++p) {
    if (p < n_slices) load_weights(p);
  }
  wait_for_previous_kernel();
#pragma unroll
  for (int p = 0; p < kWStages - 1; ++p) {
    if (p < n_slices) load_acts(p);
    ptx::cp_async_commit();
  }
  float acc[2][NT][4] = {};
  for (int i = 0; i < n_slices; ++i) {
    ptx::cp_async_wait<kWStages - 2>();
    __syncthreads();  // slice i is staged for everyone; slice i - 1's buffer is free again
    if (i + kWStages - 1 < n_slices) {
      load_weights(i + kWStages - 1);
      load_acts(i + kWStages - 1);
    }
    ptx::cp_async_commit();
    const uint8_t* s = stage(i);
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      SpanWeights sw;
      span_from_stage(s, s + WStage<NT>::kWeights, warp_row, g, c, m, sw);
      compute_span<NT, 2>(sw, s + WStage<NT>::kWeights + WStage<NT>::kScales + m * kSpanCols * 2, g, c, acc);
    }
  }
  store_acc<NT>(acc, row0 + warp_row, g, c, rows, n, dest);
}

// Row r of token t = sum over splits, in split order, of partial[s][t][r] (the whole GPU adds; a
// last-block reduction inside the product kernel measured slower: one block per row block summing
// serially).
// Each group of up to kSumBatch splits is loaded before it is added: a thread holds ~1 element, so
// one load at a time left it waiting `splits` DRAM round trips (a large share of a 64-token step:
// docs/history/performance-2026-11.md, session 5). The additions keep split order, so the bits do not change.
constexpr int kSumBatch = 16;
__global__ void sum_splits_kernel(const float* __restrict__ partial, int splits, int n, int rows, RowSegments out) {
  wait_for_previous_kernel();
  const size_t total = static_cast<size_t>(n) * rows, split_stride = total;
  for (size_t e = global_thread(); e < total; e += global_threads()) {
    float sum = 0.0f;
    for (int s0 = 0; s0 < splits; s0 += kSumBatch) {
      float p[kSumBatch];
#pragma unroll
      for (int i = 0; i < kSumBatch; ++i) {
        if (s0 + i < splits) p[i] = partial[static_cast<size_t>(s0 + i) * split_stride + e];
      }
      sum = s0 == 0 ? p[0] : sum + p[0];
#pragma unroll
      for (int i = 1; i < kSumBatch; ++i) {
        if (s0 + i < splits) sum += p[i];
      }
    }
    *segment_out(out, static_cast<int>(e % rows), static_cast<int>(e / rows)) = sum;
  }
}

template <int NT, int R, int kMinBlocks = 1>
cudaError_t launch_tiles(const cpu::WeightView& w, const __nv_bfloat16* xb, int n, const KSplit& split,
                         const Destination& dest, cudaStream_t stream, bool dependent) {
  constexpr size_t smem = kStages * stage_bytes<NT, R>();
  if (const cudaError_t e = allow_dynamic_smem<gemm_q8_split_small_kernel<NT, R, kMinBlocks>>(smem); e != cudaSuccess) {
    return e;
  }
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  const dim3 grid(static_cast<unsigned>((rows + kBlockRows - 1) / kBlockRows), static_cast<unsigned>(split.splits));
  return launch_maybe_dependent(gemm_q8_split_small_kernel<NT, R, kMinBlocks>, grid, dim3(kThreads), smem, stream,
                                dependent, static_cast<const uint8_t*>(w.data), rows, cols, w.row_bytes, xb, n,
                                split.spans, dest);
}

template <int NT>
cudaError_t launch_staged(const cpu::WeightView& w, const __nv_bfloat16* xb, int n, const KSplit& split,
                          const Destination& dest, cudaStream_t stream, bool dependent) {
  constexpr size_t smem = static_cast<size_t>(kWStages) * WStage<NT>::kBytes;
  static_assert(smem <= 227 * 1024, "a block's stages must fit in shared memory");
  if (const cudaError_t e = allow_dynamic_smem<gemm_q8_split_staged_kernel<NT>>(smem); e != cudaSuccess) return e;
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  const dim3 grid(static_cast<unsigned>((rows + kBlockRows - 1) / kBlockRows), static_cast<unsigned>(split.splits));
  return launch_maybe_dependent(gemm_q8_split_staged_kernel<NT>, grid, dim3(kThreads), smem, stream, dependent,
                                static_cast<const uint8_t*>(w.data), rows, cols, w.row_bytes, xb, n, split.spans, dest);
}

// Variant 0: the weights stream into a register ring of 4 spans (3 in flight) while the accumulators
// are few, 2 at 5+ tiles (register budget), one block per SM. Variant 1: the weights staged in
// shared memory with the activations (kWStages stages). Same bits (same fragments, K split, order).
cudaError_t launch_for_tokens(int variant, const cpu::WeightView& w, const __nv_bfloat16* xb, int n,
                              const KSplit& split, const Destination& dest, cudaStream_t s, bool dep) {
  const int tiles = (n + 7) / 8;
  if (variant == 1) {
    switch (tiles) {
      case 1:
        return launch_staged<1>(w, xb, n, split, dest, s, dep);
      case 2:
        return launch_staged<2>(w, xb, n, split, dest, s, dep);
      case 3:
        return launch_staged<3>(w, xb, n, split, dest, s, dep);
      case 4:
        return launch_staged<4>(w, xb, n, split, dest, s, dep);
      case 5:
        return launch_staged<5>(w, xb, n, split, dest, s, dep);
      case 6:
        return launch_staged<6>(w, xb, n, split, dest, s, dep);
      case 7:
        return launch_staged<7>(w, xb, n, split, dest, s, dep);
      case 8:
        return launch_staged<8>(w, xb, n, split, dest, s, dep);
      default:
        return cudaErrorInvalidValue;
    }
  }
  switch (tiles) {
    case 1:
      return launch_tiles<1, 4>(w, xb, n, split, dest, s, dep);
    case 2:
      return launch_tiles<2, 4>(w, xb, n, split, dest, s, dep);
    case 3:
      return launch_tiles<3, 4>(w, xb, n, split, dest, s, dep);
    case 4:
      return launch_tiles<4, 4>(w, xb, n, split, dest, s, dep);
    case 5:
      return launch_tiles<5, 2>(w, xb, n, split, dest, s, dep);
    case 6:
      return launch_tiles<6, 2>(w, xb, n, split, dest, s, dep);
    case 7:
      return launch_tiles<7, 2>(w, xb, n, split, dest, s, dep);
    case 8:
      return launch_tiles<8, 2>(w, xb, n, split, dest, s, dep);
    default:
      return cudaErrorInvalidValue;
  }
}
static_assert(kMaxTiles == 8, "launch_for_tokens covers 1..8 tiles");

// The product's rows go to `out` (segments covering [0, w.rows) in order).
cudaError_t run_segments(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                         const RowSegments& out, cudaStream_t stream, bool dependent) {
  dependent = dependent && current_device_is_sm90_or_newer();
  const KSplit split = choose_split(static_cast<int>(w.rows), static_cast<int>(w.cols), current_device_sm_count());
  const size_t x_bytes = (n * w.cols * 2 + 255) / 256 * 256;
  const size_t part_bytes = split.splits > 1 ? static_cast<size_t>(split.splits) * n * w.rows * sizeof(float) : 0;
  cudaError_t e = cudaSuccess;
  auto* ws = static_cast<uint8_t*>(stream_workspace(x_bytes + part_bytes, stream, &e));
  if (ws == nullptr) return e;
  auto* xb = reinterpret_cast<__nv_bfloat16*>(ws);
  if ((e = launch_x_to_bf16(x, n > 1 ? xs : w.cols, n, w.cols, xb, stream, dependent)) != cudaSuccess) return e;
  const int nt = static_cast<int>(n);
  Destination dest{split.splits > 1 ? reinterpret_cast<float*>(ws + x_bytes) : nullptr, out};
  if ((e = launch_for_tokens(variant, w, xb, nt, split, dest, stream, dependent)) != cudaSuccess || split.splits == 1) {
    return e;
  }
  return launch_sum_splits(dest.partial, split.splits, n, w.rows, out, stream, dependent);
}

}  // namespace
}  // namespace ds::cuda::detail
