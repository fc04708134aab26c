// Small-batch Q8_0 product over split rows on int8 tensor cores, the weights used as they are
// stored (see matmul_fast.h, gemm_q8_split_int8). The int8 twin of gemm_q8_split_small.cu: same
// tiling (256 rows per block of 8 warps, 32 rows per warp = two m16 tiles, every token of the
// call in n8 tiles), same K split (split_small_common.cuh), same partial-sum order and row-segment
// destinations; what differs is the arithmetic.
//
// Activations: a pre-pass (x_to_int8x2_kernel) writes, per token and per 32-column block, an f32
// scale u and for every column an integer Q = 254 a + b with a, b in [-127, 127] (two int8
// levels): x ~= u Q. Proof of the bound (m = max |x| over the block, kQMax = 127 * 254 + 127 =
// 32385, u = fl(m / kQMax), Q = rint(fl(x / u))):
//   x / u <= m / u <= kQMax (1 + 2^-23), so fl(x / u) <= 32385.004 and rint never leaves the
//   range (the clamp in int8x2::quantize is a guard only); |fl(x/u) - x/u| <= 2^-24 |x/u| <= 0.002, hence
//   |Q - x/u| <= 0.502 and |x - u Q| <= 0.502 u <= 0.502 m (1 + 2^-24) / 32385 < 2^-15.98 m.
//   When u is subnormal or 0 the stored u is still what the products use, so the same argument
//   holds with an absolute term: |x - u Q| <= 2^-15.98 m + 2^-134 always.
// (bf16 rounding of x, the bf16 kernel's operand, errs by up to 2^-9 |x|.) a = Q split base 254:
// a = sign(Q) floor((|Q| + 126) / 254), b = Q - 254 a, so |a| <= 127 and |b| <= 127. A non-finite
// block gets u = NaN (its products are NaN, never a finite answer); an all-zero block u = 0.
//
// Product: one mma.m16n8k32.s8 covers exactly one Q8_0 block for 16 rows x 8 tokens; two per
// block (levels a and b) give the exact int32 dots ca = sum q a, cb = sum q b (|c| <= 32 * 128 *
// 127 < 2^22). Their accumulators start at kMagic = bits(1.5 * 2^23), so bits(D) read as a float
// is 1.5 * 2^23 + c exactly and one FADD converts it (no quarter-rate I2F). Then, per row r,
// token t and block:
//   v = fma(float(ca), 254, float(cb))   (= 254 ca + cb = sum q Q, one rounding, 2^-24 relative)
//   acc = fma(v, d_r * u_t, acc)         (d * u: one rounding; the add: one rounding)
// so each block adds d u sum q Q = sum (d q)(u Q) = sum w x^ to within 2^-23 relative, and the
// blocks of a split are added in column order, the splits in split order (launch_sum_splits):
// the weights are exact, the activations to 2^-16 of their block's max, the accumulation f32.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8; g = lane / 4, t4 = lane %
// 4; element i of a register is byte i):
//   A (16 x 32, row): a0..a15 in 4 registers: reg 0 = row g, k 4 t4 .. + 3; reg 1 = row g + 8,
//     k 4 t4 .. + 3; reg 2 = row g, k 16 + 4 t4 .. + 3; reg 3 = row g + 8, k 16 + 4 t4 .. + 3.
//   B (32 x 8, col): 2 registers: reg 0 = k 4 t4 .. + 3 of column (token) g; reg 1 = k 16 + 4 t4
//     .. + 3 of column g.
//   C / D (16 x 8, s32): c0, c1 = row g, tokens 2 t4, 2 t4 + 1; c2, c3 = row g + 8, same tokens.
// The k index is a permutation of the block's 32 columns: lane t4 takes bytes 8 t4 .. 8 t4 + 7 of
// the block (one 8-byte read per row / token), its low word at k 4 t4 and its high word at k 16 +
// 4 t4. A and B use the same permutation, and a dot product does not care about order.
//
// Staging (cp.async, kStages stages, like gemm_q8_split_small's variant 1): each stage holds a
// 128-column slice (4 blocks) of the block's 256 rows (16-byte chunk j of row r at position
// j ^ 2 (r & 3), so the 4 rows a half-warp reads with its 8-byte loads, 32 bytes each, fall on
// disjoint banks), their 4 scales per row, and every token's two levels (288-byte rows: a
// half-warp's 4 tokens fall on disjoint banks too) and 4 scales.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/int8x2_levels.h"
#include "kernels/cuda/matmul_fast.h"
#include "kernels/cuda/ptx_mma.cuh"
#include "kernels/cuda/split_small_common.cuh"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * kWarp;
constexpr int kWarpRows = 32;  // two m16 tiles
constexpr int kBlockRows = kSplitSmallBlockRows;
static_assert(kBlockRows == kWarps * kWarpRows, "the warps tile the block's rows");
constexpr int kSliceCols = 128, kSliceBlocks = kSliceCols / 32;
constexpr int kSpansPerSlice = kSliceCols / kSplitSmallSpanCols;
static_assert(kSplitSmallUnitCols % kSliceCols == 0, "K splits are whole slices");
constexpr int kMaxTiles = static_cast<int>(kSplitSmallMaxTokens) / 8;

constexpr int kMagic = 0x4B400000;      // bits of 1.5 * 2^23
constexpr float kMagicF = 12582912.0f;

// ---- activation pre-pass (int8x2_levels.h has its arithmetic and CPU reference) ----

// One warp per (token, 32-column block), one lane per column: levels[t][cols] (level a),
// levels[n + t][cols] (level b), scales[t][cols / 32] = u.
__global__ void x_to_int8x2_kernel(const float* __restrict__ x, size_t xs, int n, int cols, int8_t* __restrict__ levels,
                                   float* __restrict__ scales) {
  wait_for_previous_kernel();  // x is the previous kernel's output
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const size_t blocks_per_token = static_cast<size_t>(cols) / 32, items = blocks_per_token * n;
  const size_t warps = global_threads() / kWarp;
  for (size_t item = global_thread() / kWarp; item < items; item += warps) {
    const size_t t = item / blocks_per_token, blk = item % blocks_per_token;
    const float v = x[t * xs + blk * 32 + lane];
    const bool finite = __all_sync(0xFFFFFFFFu, isfinite(v));
    const float u = finite ? int8x2::block_scale(warp_max(fabsf(v))) : __int_as_float(0x7FC00000);  // NaN
    int8_t a, b;
    int8x2::split_levels(finite ? int8x2::quantize(v, u) : 0, a, b);
    const size_t col = t * cols + blk * 32 + lane;
    levels[col] = a;
    levels[static_cast<size_t>(n) * cols + col] = b;
    if (lane == 0) scales[item] = u;
  }
}

// ---- the product ----

// One stage's bytes: weights (256 rows x 128 columns, swizzled chunks), the rows' scales (4 fp16
// each), the tokens' levels (a then b, 288-byte rows) and their scales (4 f32 each).
template <int NT>
struct Stage {
  static constexpr int kTokens = NT * 8;
  static constexpr int kWeights = kBlockRows * kSliceCols;
  static constexpr int kRowScales = kBlockRows * kSliceBlocks * 2;
  static constexpr int kActPitch = 2 * kSliceCols + 32;
  static constexpr int kActs = kTokens * kActPitch;
  static constexpr int kActScales = kTokens * kSliceBlocks * 4;
  static constexpr int kRowScalesAt = kWeights, kActsAt = kRowScalesAt + kRowScales, kActScalesAt = kActsAt + kActs;
  static constexpr int kBytes = kActScalesAt + kActScales;
};

__device__ __forceinline__ int swizzled_chunk(int row, int chunk) { return chunk ^ ((row & 3) << 1); }

// Where a thread works: its warp, lane group g and quad index t4, and the block's K range.
struct BlockTile {
  int warp, g, t4, first_span, n_slices;
};
__device__ __forceinline__ BlockTile block_tile(int cols, int spans_per_split) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int first_span = static_cast<int>(blockIdx.y) * spans_per_split;
  const int spans = min(cols / kSplitSmallSpanCols, first_span + spans_per_split) - first_span;
  return {static_cast<int>(threadIdx.x) / kWarp, lane / 4, lane % 4, first_span, spans / kSpansPerSlice};
}

// The activations of the call, as the pre-pass wrote them.
struct Acts {
  const int8_t* levels;  // [2][n][cols]: level a, then level b
  const float* scales;   // [n][cols / 32]
  int n;
};

// Stages the weights (and their scales) of the block's rows for the slice at column col0.
template <int NT>
__device__ __forceinline__ void stage_weights(const uint8_t* __restrict__ w, int rows, int cols, size_t row_bytes,
                                              int row0, int col0, uint8_t* dst) {
  constexpr int kChunks = kBlockRows * kSliceCols / 16;
  static_assert(kChunks % kThreads == 0 && kBlockRows == kThreads, "whole chunks per thread, a row's scales each");
  // An opaque copy of the thread index: without it the compiler hoists the 8 row addresses out of
  // the slice loop and keeps them in 16+ registers for the whole kernel (spills at 2 blocks/SM).
  int tid = static_cast<int>(threadIdx.x);
  asm volatile("" : "+r"(tid));
#pragma unroll
  for (int k = 0; k < kChunks / kThreads; ++k) {
    const int q = tid + k * kThreads, r = q / 8, j = q % 8;
    const uint8_t* row = w + static_cast<size_t>(min(row0 + r, rows - 1)) * row_bytes;
    ptx::cp_async16(ptx::smem_u32(dst + r * kSliceCols + 16 * swizzled_chunk(r, j)), row + col0 + 16 * j, true);
  }
  const int r = tid;
  const uint8_t* row = w + static_cast<size_t>(min(row0 + r, rows - 1)) * row_bytes;
  ptx::cp_async8(ptx::smem_u32(dst + Stage<NT>::kRowScalesAt + r * kSliceBlocks * 2), row + cols + col0 / 16);
}

// Stages every token's levels and scales for the slice at col0; tokens >= n are zero-filled.
template <int NT>
__device__ __forceinline__ void stage_acts(const Acts& x, int cols, int col0, uint8_t* dst) {
  constexpr int kLevelChunks = kSliceCols / 16, kPerToken = 2 * kLevelChunks + 1;
  for (int q = static_cast<int>(threadIdx.x); q < Stage<NT>::kTokens * kPerToken; q += kThreads) {
    const int t = q / kPerToken, part = q % kPerToken;
    const bool valid = t < x.n;
    const size_t tv = valid ? t : 0;
    if (part < 2 * kLevelChunks) {
      const int level = part / kLevelChunks, chunk = part % kLevelChunks;
      const int8_t* src = x.levels + (level * static_cast<size_t>(x.n) + tv) * cols + col0 + 16 * chunk;
      ptx::cp_async16(ptx::smem_u32(dst + Stage<NT>::kActsAt + t * Stage<NT>::kActPitch + level * kSliceCols + 16 * chunk),
                      src, valid);
    } else {
      const float* src = x.scales + tv * (cols / 32) + col0 / 32;
      ptx::cp_async16(ptx::smem_u32(dst + Stage<NT>::kActScalesAt + t * kSliceBlocks * 4), src, valid);
    }
  }
}

// The warp's share of one staged slice: for each of the 4 blocks, the A fragments of both m tiles
// (rows g, g + 8 of each), then per token tile the two levels' B fragments, two mmas per m tile
// and the scaled f32 accumulation.
template <int NT>
__device__ __forceinline__ void compute_slice(const uint8_t* s, int warp_row, int g, int t4, float (&acc)[2][NT][4]) {
  const uint8_t* weights = s;
  // Row scales: rows warp_row + g + 8 i (i = 0..3), 4 fp16 (one per block) each.
  uint2 d_raw[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    d_raw[i] = *reinterpret_cast<const uint2*>(s + Stage<NT>::kRowScalesAt + (warp_row + g + 8 * i) * kSliceBlocks * 2);
  }
  // Not unrolled: unrolling the blocks hoists their fragment loads and costs ~30 registers (ptxas:
  // 158 at one token tile), which the 2-blocks-per-SM variants cannot afford.
#pragma unroll 1
  for (int blk = 0; blk < kSliceBlocks; ++blk) {
    uint32_t a[2][4];
    float d[2][2];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = warp_row + g + 8 * i, mt = i / 2, h = i % 2;
      const uint2 q = *reinterpret_cast<const uint2*>(weights + r * kSliceCols + 16 * swizzled_chunk(r, 2 * blk + t4 / 2) +
                                                      8 * (t4 % 2));
      a[mt][h] = q.x;      // reg 0 / 1: k 4 t4 .. + 3 of row g / g + 8
      a[mt][2 + h] = q.y;  // reg 2 / 3: k 16 + 4 t4 .. + 3
      const uint32_t pair = blk < 2 ? d_raw[i].x : d_raw[i].y;
      d[mt][h] = half_bits_to_float(static_cast<uint16_t>(blk % 2 == 0 ? pair & 0xFFFFu : pair >> 16));
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint8_t* act = s + Stage<NT>::kActsAt + (8 * j + g) * Stage<NT>::kActPitch + 32 * blk + 8 * t4;
      const uint2 la = *reinterpret_cast<const uint2*>(act);
      const uint2 lb = *reinterpret_cast<const uint2*>(act + kSliceCols);
      const auto* us = reinterpret_cast<const float*>(s + Stage<NT>::kActScalesAt);
      const float u[2] = {us[(8 * j + 2 * t4) * kSliceBlocks + blk], us[(8 * j + 2 * t4 + 1) * kSliceBlocks + blk]};
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        int ca[4], cb[4];
        ptx::mma_s8(ca, a[mt], la.x, la.y, kMagic);
        ptx::mma_s8(cb, a[mt], lb.x, lb.y, kMagic);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = fmaf(__int_as_float(ca[e]) - kMagicF, 254.0f, __int_as_float(cb[e]) - kMagicF);
          acc[mt][j][e] = fmaf(v, d[mt][e / 2] * u[e % 2], acc[mt][j][e]);
        }
      }
    }
  }
}

template <int NT, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    gemm_q8_split_int8_kernel(const uint8_t* __restrict__ w, int rows, int cols, size_t row_bytes, Acts x,
                              int spans_per_split, Destination dest) {
  extern __shared__ __align__(16) uint8_t stages[];
  const BlockTile tile = block_tile(cols, spans_per_split);
  const int g = tile.g, t4 = tile.t4, n_slices = tile.n_slices;
  const int row0 = static_cast<int>(blockIdx.x) * kBlockRows, warp_row = tile.warp * kWarpRows;
  const auto stage = [&](int slice) { return stages + (slice % kStages) * Stage<NT>::kBytes; };
  const auto col0 = [&](int slice) { return (tile.first_span + kSpansPerSlice * slice) * kSplitSmallSpanCols; };
  // The first stages' weights go out before the wait (they never change; the activations and the
  // outputs may be the previous kernel's): they travel in the first commit group.
#pragma unroll
  for (int p = 0; p < kStages - 1; ++p) {
    if (p < n_slices) stage_weights<NT>(w, rows, cols, row_bytes, row0, col0(p), stage(p));
  }
  wait_for_previous_kernel();
#pragma unroll
  for (int p = 0; p < kStages - 1; ++p) {
    if (p < n_slices) stage_acts<NT>(x, cols, col0(p), stage(p));
    ptx::cp_async_commit();
  }
  float acc[2][NT][4] = {};
  for (int i = 0; i < n_slices; ++i) {
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();  // slice i is staged for everyone; slice i - 1's buffer is free again
    const int ahead = i + kStages - 1;
    if (ahead < n_slices) {
      stage_weights<NT>(w, rows, cols, row_bytes, row0, col0(ahead), stage(ahead));
      stage_acts<NT>(x, cols, col0(ahead), stage(ahead));
    }
    ptx::cp_async_commit();
    compute_slice<NT>(stage(i), warp_row, g, t4, acc);
  }
  store_acc<NT>(acc, row0 + warp_row, g, t4, rows, x.n, dest);
}

template <int NT, int kStages, int kMinBlocks>
cudaError_t launch_tiles(const cpu::WeightView& w, const Acts& x, const KSplit& split, const Destination& dest,
                         cudaStream_t stream, bool dependent) {
  constexpr size_t smem = static_cast<size_t>(kStages) * Stage<NT>::kBytes;
  static_assert(smem <= 227 * 1024, "a block's stages must fit in shared memory");
  static_assert(kMinBlocks == 1 || kMinBlocks * (smem + 1024) <= 228 * 1024, "kMinBlocks blocks must fit on an SM");
  constexpr auto kernel = gemm_q8_split_int8_kernel<NT, kStages, kMinBlocks>;
  if (const cudaError_t e = allow_dynamic_smem<kernel>(smem); e != cudaSuccess) return e;
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  const dim3 grid(static_cast<unsigned>((rows + kBlockRows - 1) / kBlockRows), static_cast<unsigned>(split.splits));
  return launch_maybe_dependent(kernel, grid, dim3(kThreads), smem, stream, dependent,
                                static_cast<const uint8_t*>(w.data), rows, cols, w.row_bytes, x, split.spans, dest);
}

// Launch shapes (the same bits: the slices, fragments and order do not change):
//   0: 4 stages, 1 block (8 warps) per SM: three 32 KB weight slices in flight per block;
//   1: 2 stages, 2 blocks (16 warps) per SM: one slice in flight per block, more warps to issue;
//   2: 3 stages, 2 blocks per SM up to 8 tokens (1 beyond: it does not fit twice).
template <int NT>
cudaError_t launch_variant(int variant, const cpu::WeightView& w, const Acts& x, const KSplit& split,
                           const Destination& dest, cudaStream_t s, bool dep) {
  switch (variant) {
    case 0: return launch_tiles<NT, 4, 1>(w, x, split, dest, s, dep);
    case 1: return launch_tiles<NT, 2, 2>(w, x, split, dest, s, dep);
    case 2: return launch_tiles<NT, 3, NT == 1 ? 2 : 1>(w, x, split, dest, s, dep);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_for_tokens(int variant, const cpu::WeightView& w, const Acts& x, const KSplit& split,
                              const Destination& dest, cudaStream_t s, bool dep) {
  switch ((x.n + 7) / 8) {
    case 1: return launch_variant<1>(variant, w, x, split, dest, s, dep);
    case 2: return launch_variant<2>(variant, w, x, split, dest, s, dep);
    case 3: return launch_variant<3>(variant, w, x, split, dest, s, dep);
    case 4: return launch_variant<4>(variant, w, x, split, dest, s, dep);
    case 5: return launch_variant<5>(variant, w, x, split, dest, s, dep);
    case 6: return launch_variant<6>(variant, w, x, split, dest, s, dep);
    case 7: return launch_variant<7>(variant, w, x, split, dest, s, dep);
    case 8: return launch_variant<8>(variant, w, x, split, dest, s, dep);
    default: return cudaErrorInvalidValue;
  }
}
static_assert(kMaxTiles == 8, "launch_for_tokens covers 1..8 tiles");

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The product's rows go to `out` (segments covering [0, w.rows) in order).
cudaError_t run_segments(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                         const RowSegments& out, cudaStream_t stream, bool dependent) {
  dependent = dependent && current_device_is_sm90_or_newer();
  const KSplit split = choose_split(static_cast<int>(w.rows), static_cast<int>(w.cols), current_device_sm_count());
  const size_t level_bytes = round_up_256(2 * n * w.cols), scale_bytes = round_up_256(n * w.cols / 32 * sizeof(float));
  const size_t part_bytes = split.splits > 1 ? static_cast<size_t>(split.splits) * n * w.rows * sizeof(float) : 0;
  cudaError_t e = cudaSuccess;
  auto* ws = static_cast<uint8_t*>(stream_workspace(level_bytes + scale_bytes + part_bytes, stream, &e));
  if (ws == nullptr) return e;
  auto* levels = reinterpret_cast<int8_t*>(ws);
  auto* scales = reinterpret_cast<float*>(ws + level_bytes);
  if ((e = launch_x_to_int8x2(x, n > 1 ? xs : w.cols, n, w.cols, levels, scales, stream, dependent)) != cudaSuccess) {
    return e;
  }
  const Acts acts{levels, scales, static_cast<int>(n)};
  const Destination dest{split.splits > 1 ? reinterpret_cast<float*>(ws + level_bytes + scale_bytes) : nullptr, out};
  if ((e = launch_for_tokens(variant, w, acts, split, dest, stream, dependent)) != cudaSuccess || split.splits == 1) {
    return e;
  }
  return launch_sum_splits(dest.partial, split.splits, n, w.rows, out, stream, dependent);
}

}  // namespace

cudaError_t launch_x_to_int8x2(const float* x, size_t xs, size_t n, size_t cols, int8_t* levels, float* scales,
                               cudaStream_t stream, bool dependent) {
  if (x == nullptr || levels == nullptr || scales == nullptr || n == 0 || cols == 0 || cols % 32 != 0) {
    return cudaErrorInvalidValue;
  }
  if (!aligned_to(x, 4) || !aligned_to(scales, 4) || (n > 1 && xs < cols) || n * cols >= (size_t{1} << 31)) {
    return cudaErrorInvalidValue;
  }
  const size_t warps = n * cols / 32;
  return launch_maybe_dependent(x_to_int8x2_kernel, dim3(grid_for(warps, 8, 132 * 16)), dim3(256), 0, stream,
                                dependent && current_device_is_sm90_or_newer(), x, xs, static_cast<int>(n),
                                static_cast<int>(cols), levels, scales);
}

bool gemm_q8_split_int8_applies(const cpu::WeightView& w, const float* x, size_t xs, const float* y, size_t ys,
                                size_t n_tokens) {
  return gemm_q8_split_small_applies(w, x, xs, y, ys, n_tokens);  // the same tiling and K split
}

cudaError_t gemm_q8_split_int8_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                       float* y, size_t ys, cudaStream_t stream, bool dependent) {
  if (variant < 0 || variant >= kSplitInt8Variants) return cudaErrorInvalidValue;
  if (w.type != GgmlType::Q8_0_SPLIT) return cudaErrorNotSupported;
  if (!gemm_q8_split_int8_applies(w, x, xs, y, ys, n)) return cudaErrorInvalidValue;
  return run_segments(variant, w, x, xs, n, RowSegments::whole(y, w.rows, n > 1 ? ys : w.rows), stream, dependent);
}

cudaError_t gemm_q8_split_int8(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                               cudaStream_t stream, bool dependent) {
  return gemm_q8_split_int8_variant(kSplitInt8DefaultVariant, w, x, xs, n, y, ys, stream, dependent);
}

cudaError_t gemm_q8_split_int8_rows(const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                    const RowSegments& out, cudaStream_t stream, bool dependent) {
  if (const cudaError_t e = split_small_rows_status(w, x, xs, n, out); e != cudaSuccess) return e;  // same tiling
  return run_segments(kSplitInt8DefaultVariant, w, x, xs, n, out, stream, dependent);
}

}  // namespace ds::cuda::detail
