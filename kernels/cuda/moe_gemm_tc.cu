// The grouped MoE products on bf16 tensor cores (moe_gemm_tc.h). One kernel template serves both
// projections: a warp owns four weight rows per lane row group (gate g, g + 8 and up g, g + 8 for
// gate_up: two m16 tiles whose accumulators meet in the SwiGLU epilogue; down rows g, g + 8,
// g + 16, g + 24: two m16 tiles of one matrix), the block's 8 warps share the tile's staged B rows.
//
// Two variants: split rows stage the weights in shared memory with the B rows (moe_tc_staged_kernel,
// the production layout); GGUF-order rows (the q8_split ablation) are read straight into a
// register ring (moe_tc_kernel). The same fragments and the same K order, so the same bits.
//
// Fragment layout (as gemm_q8_split_small_kernels.cuh): per 64-column span lane (g, c) takes 16
// quants of each of its rows at columns 16 c .. 16 c + 15 (one 16-byte load; GGUF order: eight
// 2-byte loads) and uses them as the A fragments of 4 k16 steps; the B fragments are
// the same 16 columns of its pair's staged row (one 32-byte read), so the k permutation is the
// same on both sides and the sum is the plain dot product. K runs span by span in column order
// for every output element.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_gemm_tc.h"
#include "kernels/cuda/ptx_mma.cuh"
#include "kernels/cuda/q8_span_fragments.cuh"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * kWarp;
constexpr int kNP = kMoeTcTilePairs;
constexpr int kNT = kNP / 8;  // n8 mma tiles of a pair tile
constexpr int kSpanCols = 64;
constexpr int kSliceSpans = 2;                       // spans per staged slice (and in the weight ring)
constexpr int kSliceCols = kSliceSpans * kSpanCols;  // 128: D and F must be multiples
constexpr int kStages = 3;                           // slices in shared memory
constexpr int kActRowBytes = kSliceCols * 2 + 16;    // +16: rows g, g + 1 of a quarter warp on disjoint banks
constexpr int kStageBytes = kNP * kActRowBytes;
constexpr size_t kSmemBytes = static_cast<size_t>(kStages) * kStageBytes;  // 52 KB: dynamic
constexpr int kChunksPerRow = kSliceCols * 2 / 16;                         // 16-byte cp.async chunks per staged row

// Output rows per warp and per block: gate_up 16 (one m16 tile of each matrix), down 32.
template <bool kGateUp>
constexpr int warp_rows() {
  return kGateUp ? 16 : 32;
}
template <bool kGateUp>
constexpr int block_rows() {
  return kWarps * warp_rows<kGateUp>();
}

// 16 quants of a row from column col (col % 16 == 0) and their block's scale. Typed loads only: the
// split rows are 16-byte aligned; a GGUF block is 2-byte aligned (offset 2 or 18 in its block).
template <GgmlType W>
__device__ __forceinline__ void load_quants(const uint8_t* row, int cols, int col, uint4& q, uint16_t& d) {
  if constexpr (W == GgmlType::Q8_0_SPLIT) {
    q = __ldg(reinterpret_cast<const uint4*>(row + col));
    d = __ldg(reinterpret_cast<const unsigned short*>(row + cols) + col / 32);
  } else {
    const uint8_t* blk = row + static_cast<size_t>(col / 32) * kQ8BlockBytes;
    const auto* h = reinterpret_cast<const unsigned short*>(blk);
    d = __ldg(h);
    const int o = 1 + (col % 32) / 2;  // in u16 units: the scale, then the quants
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = uint32_t{__ldg(h + o + 2 * i)} | (uint32_t{__ldg(h + o + 2 * i + 1)} << 16);
    q = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <GgmlType W>
__device__ __forceinline__ void load_span(const uint8_t* const (&row_ptr)[4], int cols, int span, int c,
                                          SpanWeights& s) {
  const int col = span * kSpanCols + 16 * c;
#pragma unroll
  for (int i = 0; i < 4; ++i) load_quants<W>(row_ptr[i], cols, col, s.q[i], s.d[i]);
}

// One span against the tile's first n_groups groups of 8 pairs (the rest are padding: skipped,
// warp-uniformly). act: the span's first column of slot 0's staged row.
__device__ __forceinline__ void compute_span(const SpanWeights& s, const uint8_t* act, int g, int c, int n_groups,
                                             float (&acc)[2][kNT][4]) {
  uint32_t a[2][4][4];
  span_fragments(s, a);
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    if (j >= n_groups) break;
    const uint8_t* p = act + (8 * j + g) * kActRowBytes + 32 * c;
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

// Stages columns [col0, col0 + kSliceCols) of the tile's B rows (src[slot]: the bf16 row, nullptr
// for padding, zero-filled) for the first n_groups groups of 8 slots.
__device__ __forceinline__ void stage_slice(const __nv_bfloat16* const* src, int n_groups, int col0, uint8_t* dst) {
  for (int chunk = static_cast<int>(threadIdx.x); chunk < n_groups * 8 * kChunksPerRow; chunk += kThreads) {
    const int slot = chunk / kChunksPerRow, part = chunk % kChunksPerRow;
    const __nv_bfloat16* row = src[slot];
    const bool valid = row != nullptr;
    const uint8_t* from = reinterpret_cast<const uint8_t*>(valid ? row + col0 : src[0]) + (valid ? 16 * part : 0);
    ptx::cp_async16(ptx::smem_u32(dst + slot * kActRowBytes + 16 * part), from, valid);
  }
}

// The tile's slots in shared memory: each slot's pair and B row; returns the number of pairs
// (a tile's pairs fill its first slots).
template <bool kGateUp>
__device__ __forceinline__ int load_tile(const MoeTcProblem& a, int tile, int (&pair)[kNP],
                                         const __nv_bfloat16* (&src)[kNP]) {
  const int tid = static_cast<int>(threadIdx.x);
  int p = -1;
  if (tid < kNP) {
    p = a.tile_pairs[static_cast<size_t>(tile) * kNP + tid];
    pair[tid] = p;
    if (p < 0) {
      src[tid] = nullptr;
    } else {
      src[tid] = kGateUp ? a.xb + static_cast<size_t>(p / a.k) * a.dim : a.h + static_cast<size_t>(p) * a.ffn;
    }
  }
  return __syncthreads_count(p >= 0);
}

// Start of the lane's 4 weight rows (clamped into the expert; rows past it are never stored).
template <bool kGateUp>
__device__ __forceinline__ void row_pointers(const MoeTcProblem& a, int e, int warp_row, int g,
                                             const uint8_t* (&row_ptr)[4]) {
  if constexpr (kGateUp) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const size_t r = static_cast<size_t>(e) * a.ffn + min(warp_row + g + 8 * (i % 2), a.ffn - 1);
      row_ptr[i] = (i < 2 ? a.gate : a.up) + r * a.gate_row_bytes;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const size_t r = static_cast<size_t>(e) * a.dim + min(warp_row + g + 8 * i, a.dim - 1);
      row_ptr[i] = a.down + r * a.down_row_bytes;
    }
  }
}

// C fragment element q of acc[.][j]: slot 8 j + 2 c + (q & 1), row (g + 8 (q >> 1)) of its m tile.
template <bool kGateUp>
__device__ __forceinline__ void store_tile(const MoeTcProblem& a, const float (&acc)[2][kNT][4], const int (&pair)[kNP],
                                           int n_groups, int warp_row, int g, int c) {
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    if (j >= n_groups) break;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int p = pair[8 * j + 2 * c + (q & 1)], r = warp_row + g + 8 * (q >> 1);
      if (p < 0) continue;
      if constexpr (kGateUp) {
        if (r < a.ffn) a.h[static_cast<size_t>(p) * a.ffn + r] = __float2bfloat16_rn(silu(acc[0][j][q]) * acc[1][j][q]);
      } else {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          if (r + 16 * mt < a.dim) a.part[static_cast<size_t>(p) * a.dim + r + 16 * mt] = acc[mt][j][q];
        }
      }
    }
  }
}

// grid (tiles, row blocks of the expert's F (gate_up) or D (down) rows).
template <GgmlType W, bool kGateUp>
__global__ void __launch_bounds__(kThreads) moe_tc_kernel(MoeTcProblem a) {
  extern __shared__ __align__(16) uint8_t stages[];
  __shared__ int pair[kNP];
  __shared__ const __nv_bfloat16* src[kNP];
  wait_for_previous_kernel();  // the tiles come from the sort, B from the previous launch
  const int tile = static_cast<int>(blockIdx.x), e = a.tile_expert[tile];
  if (e < 0 || e >= a.n_experts) return;  // block-uniform
  const int n_groups = (load_tile<kGateUp>(a, tile, pair, src) + 7) / 8;
  const int lane = static_cast<int>(threadIdx.x) % kWarp, g = lane / 4, c = lane % 4;
  const int warp_row = static_cast<int>(blockIdx.y) * block_rows<kGateUp>() +
                       static_cast<int>(threadIdx.x) / kWarp * warp_rows<kGateUp>();
  const bool active = warp_row < (kGateUp ? a.ffn : a.dim);  // warp-uniform; all warps stage
  const int K = kGateUp ? a.dim : a.ffn, n_slices = K / kSliceCols;
  const uint8_t* row_ptr[4];
  row_pointers<kGateUp>(a, e, warp_row, g, row_ptr);
  const auto stage = [&](int slice) { return stages + (slice % kStages) * kStageBytes; };

  SpanWeights ring[kSliceSpans];
#pragma unroll
  for (int r = 0; r < kSliceSpans; ++r) load_span<W>(row_ptr, K, r, c, ring[r]);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_slices) stage_slice(src, n_groups, s * kSliceCols, stage(s));
    ptx::cp_async_commit();
  }
  float acc[2][kNT][4] = {};
  for (int i = 0; i < n_slices; ++i) {
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();  // slice i is staged for everyone; slice i - 1's buffer is free again
    const int ahead = i + kStages - 1;
    if (ahead < n_slices) stage_slice(src, n_groups, ahead * kSliceCols, stage(ahead));
    ptx::cp_async_commit();
    const uint8_t* act = stage(i);
#pragma unroll
    for (int r = 0; r < kSliceSpans; ++r) {
      if (active) compute_span(ring[r], act + r * kSpanCols * 2, g, c, n_groups, acc);
      if (i + 1 < n_slices) load_span<W>(row_ptr, K, (i + 1) * kSliceSpans + r, c, ring[r]);
    }
  }
  if (active) store_tile<kGateUp>(a, acc, pair, n_groups, warp_row, g, c);
}

// ---- Split rows: the weights staged in shared memory too ----
// Registers alone hold one slice of weights in flight per lane (the kernel above needs ~210 of
// them, so one block per SM): too few bytes in flight to stream an expert's rows at bandwidth.
// With split rows (16-byte aligned) the block's 256 weight rows of a slice (gate_up: 128 gate then
// 128 up rows; down: 256 rows) go to shared memory by cp.async with the B rows, kWStages slices
// deep. Chunk j of staged row r sits at position j ^ 4 (r & 1), so the two rows a quarter warp
// reads fall on disjoint banks (gemm_q8_split_small_kernels.cuh's staged variant).
constexpr int kStagedRows = 256;
constexpr int kWStages = 3;                       // 3 x 52 KB: fits sm_80's 163 KB as well as sm_90's 227 KB
constexpr int kScaleBytes = kSliceCols / 32 * 2;  // 4 fp16 per row and slice
constexpr int kWeightBytes = kStagedRows * kSliceCols;
constexpr int kActOffset = kWeightBytes + kStagedRows * kScaleBytes;  // the B rows within a stage
constexpr int kWStageBytes = kActOffset + kStageBytes;
constexpr size_t kWSmemBytes = static_cast<size_t>(kWStages) * kWStageBytes;
static_assert(block_rows<true>() * 2 == kStagedRows && block_rows<false>() == kStagedRows,
              "a block stages its gate and up rows, or its down rows, as 256 rows");

__device__ __forceinline__ int swizzled_chunk(int row, int chunk) {
  return chunk ^ ((row & 1) << 2);
}

// Staged row r of row block rb of expert e (clamped into the expert; rows past it are never stored).
template <bool kGateUp>
__device__ __forceinline__ const uint8_t* staged_row(const MoeTcProblem& a, int e, int rb, int r) {
  if constexpr (kGateUp) {
    const int half = r / block_rows<true>(), rr = min(rb * block_rows<true>() + r % block_rows<true>(), a.ffn - 1);
    return (half == 0 ? a.gate : a.up) + (static_cast<size_t>(e) * a.ffn + rr) * a.gate_row_bytes;
  } else {
    return a.down + (static_cast<size_t>(e) * a.dim + min(rb * kStagedRows + r, a.dim - 1)) * a.down_row_bytes;
  }
}

template <bool kGateUp>
__device__ __forceinline__ void stage_weights(const MoeTcProblem& a, int e, int rb, int K, int col0, uint8_t* dst) {
  constexpr int kChunks = kStagedRows * kSliceCols / 16;
  static_assert(kChunks % kThreads == 0 && kStagedRows == kThreads, "whole chunks, one scale group per thread");
#pragma unroll
  for (int k = 0; k < kChunks / kThreads; ++k) {
    const int q = static_cast<int>(threadIdx.x) + k * kThreads, r = q / 8, j = q % 8;
    const uint8_t* row = staged_row<kGateUp>(a, e, rb, r);
    ptx::cp_async16(ptx::smem_u32(dst + r * kSliceCols + 16 * swizzled_chunk(r, j)), row + col0 + 16 * j, true);
  }
  const int r = static_cast<int>(threadIdx.x);
  ptx::cp_async8(ptx::smem_u32(dst + kWeightBytes + r * kScaleBytes), staged_row<kGateUp>(a, e, rb, r) + K + col0 / 16);
}

// The lane's share of span m of a staged slice: its 4 rows' staged indices in rows[i].
__device__ __forceinline__ void span_from_stage(const uint8_t* stage, const int (&rows)[4], int c, int m,
                                                SpanWeights& s) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = rows[i];
    s.q[i] = *reinterpret_cast<const uint4*>(stage + r * kSliceCols + 16 * swizzled_chunk(r, 4 * m + c));
    s.d[i] = *reinterpret_cast<const uint16_t*>(stage + kWeightBytes + r * kScaleBytes + 2 * (2 * m + c / 2));
  }
}

template <bool kGateUp>
__global__ void __launch_bounds__(kThreads, 1) moe_tc_staged_kernel(MoeTcProblem a) {
  extern __shared__ __align__(16) uint8_t stages[];
  __shared__ int pair[kNP];
  __shared__ const __nv_bfloat16* src[kNP];
  wait_for_previous_kernel();  // the tiles come from the sort, B from the previous launch
  const int tile = static_cast<int>(blockIdx.x), e = a.tile_expert[tile], rb = static_cast<int>(blockIdx.y);
  if (e < 0 || e >= a.n_experts) return;  // block-uniform
  const int n_groups = (load_tile<kGateUp>(a, tile, pair, src) + 7) / 8;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, c = lane % 4, warp_row = rb * block_rows<kGateUp>() + warp * warp_rows<kGateUp>();
  const bool active = warp_row < (kGateUp ? a.ffn : a.dim);  // warp-uniform; all warps stage
  const int K = kGateUp ? a.dim : a.ffn, n_slices = K / kSliceCols;
  int rows[4];  // the lane's staged rows: gate g, g + 8, up g, g + 8; or down g + 8 i
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    rows[i] = kGateUp ? (i / 2) * block_rows<true>() + warp * 16 + g + 8 * (i % 2) : warp * 32 + g + 8 * i;
  }
  const auto stage = [&](int slice) { return stages + (slice % kWStages) * kWStageBytes; };
  const auto load = [&](int slice) {
    stage_weights<kGateUp>(a, e, rb, K, slice * kSliceCols, stage(slice));
    stage_slice(src, n_groups, slice * kSliceCols, stage(slice) + kActOffset);
  };
#pragma unroll
  for (int p = 0; p < kWStages - 1; ++p) {
    if (p < n_slices) load(p);
    ptx::cp_async_commit();
  }
  float acc[2][kNT][4] = {};
  for (int i = 0; i < n_slices; ++i) {
    ptx::cp_async_wait<kWStages - 2>();
    __syncthreads();  // slice i is staged for everyone; slice i - 1's buffer is free again
    if (i + kWStages - 1 < n_slices) load(i + kWStages - 1);
    ptx::cp_async_commit();
    const uint8_t* st = stage(i);
    if (!active) continue;
#pragma unroll
    for (int m = 0; m < kSliceSpans; ++m) {
      SpanWeights sw;
      span_from_stage(st, rows, c, m, sw);
      compute_span(sw, st + kActOffset + m * kSpanCols * 2, g, c, n_groups, acc);
    }
  }
  if (active) store_tile<kGateUp>(a, acc, pair, n_groups, warp_row, g, c);
}

template <GgmlType W, bool kGateUp>
cudaError_t launch(const MoeTcProblem& a, cudaStream_t stream) {
  const int rows = kGateUp ? a.ffn : a.dim;
  const dim3 grid(static_cast<unsigned>(a.n_tiles),
                  static_cast<unsigned>((rows + block_rows<kGateUp>() - 1) / block_rows<kGateUp>()));
  if constexpr (W == GgmlType::Q8_0_SPLIT) {
    if (const cudaError_t e = allow_dynamic_smem<moe_tc_staged_kernel<kGateUp>>(kWSmemBytes); e != cudaSuccess) {
      return e;
    }
    return launch_dependent_if_enabled(moe_tc_staged_kernel<kGateUp>, grid, dim3(kThreads), kWSmemBytes, stream, a);
  } else {
    if (const cudaError_t e = allow_dynamic_smem<moe_tc_kernel<W, kGateUp>>(kSmemBytes); e != cudaSuccess) return e;
    return launch_dependent_if_enabled(moe_tc_kernel<W, kGateUp>, grid, dim3(kThreads), kSmemBytes, stream, a);
  }
}

template <bool kGateUp>
cudaError_t launch_typed(GgmlType w, const MoeTcProblem& a, cudaStream_t stream) {
  switch (w) {
    case GgmlType::Q8_0:
      return launch<GgmlType::Q8_0, kGateUp>(a, stream);
    case GgmlType::Q8_0_SPLIT:
      return launch<GgmlType::Q8_0_SPLIT, kGateUp>(a, stream);
    default:
      return cudaErrorNotSupported;
  }
}

}  // namespace

bool moe_tc_applies(GgmlType gate, GgmlType down, size_t dim, size_t ffn) {
  return is_q8_0(gate) && is_q8_0(down) && dim % kSliceCols == 0 && ffn % kSliceCols == 0;
}

cudaError_t moe_tc_gate_up(const MoeTcProblem& p, cudaStream_t stream) {
  if (p.n_tiles == 0) return cudaSuccess;
  return launch_typed<true>(p.gate_type, p, stream);
}

cudaError_t moe_tc_down(const MoeTcProblem& p, cudaStream_t stream) {
  if (p.n_tiles == 0) return cudaSuccess;
  return launch_typed<false>(p.down_type, p, stream);
}

}  // namespace ds::cuda::detail
