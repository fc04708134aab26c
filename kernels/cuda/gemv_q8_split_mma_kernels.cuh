// Internal: the kernels and the launcher of the split-rows decode GEMV on int8 tensor cores
// (gemv_q8_split_mma.cu explains them), shared by production (gemv_q8_split_mma.cu: block shape 0)
// and the kernel lab (tools/kernel_lab/split_mma_variants.cu: both shapes). Each includer gets its
// own copy.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/int8x2_levels.h"
#include "kernels/cuda/matmul_fast.h"
#include "kernels/cuda/ptx_mma.cuh"
#include "kernels/cuda/split_small_common.cuh"  // segment_out
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {
namespace {

constexpr int kTileRows = 16;
constexpr int kStageBlocks = 4, kStageCols = kStageBlocks * kQ8Block;  // 128 columns a stage
constexpr int kTokens = 4;                                             // 4 tokens x 2 levels = 8 columns
constexpr int kMaxWarps = 16;
constexpr int kLevelBytes = 8 * kQ8Block;  // one block's 8 columns of 32 levels
constexpr int kMagic = 0x4B400000;         // bits of 1.5 * 2^23
constexpr float kMagicF = 12582912.0f;
constexpr size_t kSmemLimit = 227 * 1024;  // a constant, so the geometry (and the bits) are device-independent

// ---- activations -> shared memory ------------------------------------------------------------

// One lane's 8 columns of a 32-column block of token t (with `up`: silu(x) * up, the swiglu
// kernel's f32 expression); zeros when absent.
__device__ __forceinline__ void load_eight(const float* __restrict__ x, const float* __restrict__ up, size_t at,
                                           bool present, float (&v)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = 0.0f;
  if (!present) return;
  const float4* xp = reinterpret_cast<const float4*>(x + at);
  const float4 lo = __ldg(xp), hi = __ldg(xp + 1);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  if (up == nullptr) return;
  const float4* upp = reinterpret_cast<const float4*>(up + at);
  const float4 ul = __ldg(upp), uh = __ldg(upp + 1);
  const float u8[8] = {ul.x, ul.y, ul.z, ul.w, uh.x, uh.y, uh.z, uh.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = silu(v[i]) * u8[i];
}

// Low byte of each value (a float 1.5 * 2^23 + k for an integer k in [-127, 127]: k's two's
// complement) packed into one word.
__device__ __forceinline__ uint32_t pack_low_bytes(float v0, float v1, float v2, float v3) {
  const uint32_t lo = __byte_perm(__float_as_uint(v0), __float_as_uint(v1), 0x0040u);
  const uint32_t hi = __byte_perm(__float_as_uint(v2), __float_as_uint(v3), 0x0040u);
  return __byte_perm(lo, hi, 0x5410u);
}

// The quad's block (lanes 4k .. 4k + 3 hold its 8-column parts): scale u = max|x| / kQMax (NaN
// when a value is not finite), Q = rint(t) for t = x * kQMax / max (one reciprocal per block, not
// a division per column: |Q - x / u| <= 0.5 + 2^-8, so |x - u Q| <= 0.506 u), written as the
// levels a = clamp(rint(t / 254), +-127) and b = rint(t - 254 a) (t - 254 a is exact and lies in
// [-127, 127]; it differs from t by an even integer, so both round ties alike and 254 a + b =
// rint(t)) to columns 2t and 2t + 1 of the block, u to scales. All lanes call it (shuffles).
__device__ __forceinline__ void quantize_eight(const float (&v)[8], bool present, int t, int blk, int part,
                                               uint8_t* levels, float* scales) {
  float m = 0.0f, z = 0.0f;  // z = sum of v * 0: +-0 unless some v is infinite or NaN
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    m = fmaxf(m, fabsf(v[i]));
    z = fmaf(v[i], 0.0f, z);
  }
  int finite = z == 0.0f ? 1 : 0;
#pragma unroll
  for (int off = 1; off <= 2; off *= 2) {
    m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
    finite &= __shfl_xor_sync(0xFFFFFFFFu, finite, off);
  }
  if (!present) return;
  const float inv = finite != 0 && m > 0.0f ? static_cast<float>(int8x2::kQMax) / m : 0.0f;
  float la[8], lb[8];  // 1.5 * 2^23 + level
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float tq = v[i] * inv;
    const float a = fminf(fmaxf(rintf(tq * (1.0f / 254.0f)), -127.0f), 127.0f);
    la[i] = a + kMagicF;
    lb[i] = fmaf(-254.0f, a, tq) + kMagicF;  // the add rounds to the nearest integer
  }
  uint8_t* blk_levels = levels + static_cast<size_t>(blk) * kLevelBytes + 8 * part;
  *reinterpret_cast<uint2*>(blk_levels + (2 * t) * kQ8Block) =
      make_uint2(pack_low_bytes(la[0], la[1], la[2], la[3]), pack_low_bytes(la[4], la[5], la[6], la[7]));
  *reinterpret_cast<uint2*>(blk_levels + (2 * t + 1) * kQ8Block) =
      make_uint2(pack_low_bytes(lb[0], lb[1], lb[2], lb[3]), pack_low_bytes(lb[4], lb[5], lb[6], lb[7]));
  if (part == 0) scales[blk * kTokens + t] = finite != 0 ? int8x2::block_scale(m) : __int_as_float(0x7FC00000);
}

// The warp's j-th own 32-column block: its stages are warp, warp + warps, ... (the same in every tile).
__device__ __forceinline__ int own_block(int j, int warp, int warps) {
  return (warp + (j / kStageBlocks) * warps) * kStageBlocks + j % kStageBlocks;
}

// The 32-column blocks of the warp's own stages (own_block) for the n tokens: a quad of lanes per block,
// kPassesInFlight blocks per quad with all their loads issued first (one L2 round trip per 4 passes, not per pass).
// Only this warp reads them, so a __syncwarp, not a block barrier, orders them before its mmas: no warp waits for
// another's quantization. The columns of tokens n..3 are left as they are: an mma's output
// column depends on its own input column only, and those tokens' outputs are never stored.
constexpr int kPassesInFlight = 4;
__device__ __forceinline__ void quantize_own_activations(const float* __restrict__ x, const float* __restrict__ up,
                                                         size_t xs, int n, int my_stages, uint8_t* levels,
                                                         float* scales) {
  const int warps = static_cast<int>(blockDim.x) / kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp, part = lane % 4, per_pass = kWarp / 4;
  const int my_blocks = my_stages * kStageBlocks, items = n * my_blocks;
  const auto block_of = [&](int j) { return own_block(j, warp, warps); };
  for (int base = 0; base < items; base += kPassesInFlight * per_pass) {
    float v[kPassesInFlight][8];
#pragma unroll
    for (int p = 0; p < kPassesInFlight; ++p) {
      const int i = base + p * per_pass + lane / 4, t = i / my_blocks, blk = block_of(i % my_blocks);
      load_eight(x, up, static_cast<size_t>(t) * xs + static_cast<size_t>(blk) * kQ8Block + 8 * part, i < items, v[p]);
    }
#pragma unroll
    for (int p = 0; p < kPassesInFlight; ++p) {
      const int i = base + p * per_pass + lane / 4;
      quantize_eight(v[p], i < items, i / my_blocks, block_of(i % my_blocks), part, levels, scales);
    }
  }
  __syncwarp();
}

// x (or silu(x) * up) of n <= 4 tokens quantized once into `acts` (copy_own_activations' layout),
// with quantize_eight: the bits the GEMV's own quantization gives. A quad of lanes per (token,
// 32-column block), token-major; tokens n..3 get zero levels and scales.
constexpr int kQuantizeThreads = 256;
__global__ void __launch_bounds__(kQuantizeThreads)
    quantize_acts_kernel(const float* __restrict__ x, const float* __restrict__ up, size_t xs, int n, int cols,
                         uint8_t* __restrict__ acts) {
  const int blocks = cols / kQ8Block;
  const int quad = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 4), part = threadIdx.x % 4;
  const int t = quad / blocks, blk = quad % blocks;
  float* scales = reinterpret_cast<float*>(acts + static_cast<size_t>(blocks) * kLevelBytes);
  wait_for_previous_kernel();
  const bool present = t < n;
  float v[8];
  load_eight(x, up, static_cast<size_t>(t) * xs + static_cast<size_t>(blk) * kQ8Block + 8 * part, present, v);
  quantize_eight(v, present, t, blk, part, acts, scales);  // every lane: it shuffles
  if (present || t >= kTokens) return;
  uint8_t* blk_levels = acts + static_cast<size_t>(blk) * kLevelBytes + 8 * part;
  *reinterpret_cast<uint2*>(blk_levels + (2 * t) * kQ8Block) = make_uint2(0, 0);
  *reinterpret_cast<uint2*>(blk_levels + (2 * t + 1) * kQ8Block) = make_uint2(0, 0);
  if (part == 0) scales[blk * kTokens + t] = 0.0f;
}

// The same blocks copied from activations quantized once by quantize_acts_kernel (`acts`: levels
// [cols / 32][8][32] then scales [cols / 32][4], the shared-memory layout): a wide input (ffn_down's
// 12288 columns: 12 quantization passes a warp at 4 tokens, in every block) costs one round trip of
// 16-byte copies instead. Waits for all the warp's copies, the weight stages already in flight too.
__device__ __forceinline__ void copy_own_activations(const uint8_t* __restrict__ acts, int cols, int my_stages,
                                                     uint8_t* levels, float* scales) {
  const int warps = static_cast<int>(blockDim.x) / kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  constexpr int kChunks = kLevelBytes / 16 + 1;  // a block's levels, then its 4 scales
  const size_t blocks = static_cast<size_t>(cols) / kQ8Block;
  const int items = my_stages * kStageBlocks * kChunks;
  for (int i = lane; i < items; i += kWarp) {
    const int j = i / kChunks, chunk = i % kChunks;
    const int blk = own_block(j, warp, warps);
    if (chunk < kChunks - 1) {
      ptx::cp_async16(ptx::smem_u32(levels + static_cast<size_t>(blk) * kLevelBytes + 16 * chunk),
                      acts + static_cast<size_t>(blk) * kLevelBytes + 16 * chunk, true);
    } else {
      ptx::cp_async16(ptx::smem_u32(scales + blk * kTokens), acts + blocks * kLevelBytes + blk * kTokens * 4, true);
    }
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncwarp();
}

// ---- one stage of a warp: 16 rows x 128 columns, staged through a per-warp ring -----------------
//
// A slot holds the stage's quants (16 rows x 128 bytes; 16-byte chunk j of row r at position
// j ^ 2 (r & 3), so the four rows a half-warp reads with its 8-byte fragment loads fall on disjoint
// banks) and the rows' 4 fp16 block scales. cp.async fills it with 16-byte copies, 8 lanes per row:
// every copy instruction reads 4 whole 128-byte lines (fragment-shaped 8-byte loads straight from
// global memory read one 32-byte sector per row and instruction: several times the L2 requests,
// measured: docs/history/performance-2026-11.md, session 10).

constexpr int kSlotQuantBytes = kTileRows * kStageCols, kSlotBytes = kSlotQuantBytes + kTileRows * kStageBlocks * 2;

__device__ __forceinline__ int swizzled(int row, int chunk) {
  return chunk ^ ((row & 3) << 1);
}

// cp.async.wait_group takes an immediate: waits until at most `pending` (1..4) groups are in flight.
__device__ __forceinline__ void wait_copies_but(int pending) {
  if (pending >= 4) {
    ptx::cp_async_wait<4>();
  } else if (pending == 3) {
    ptx::cp_async_wait<3>();
  } else if (pending == 2) {
    ptx::cp_async_wait<2>();
  } else {
    ptx::cp_async_wait<1>();
  }
}

// Copies stage `stage` of row tile `tile` into `slot` (rows past the matrix re-read its last row;
// never stored).
__device__ __forceinline__ void stage_copy(const uint8_t* __restrict__ w, int rows, int cols, size_t row_bytes,
                                           int tile, int stage, int lane, uint8_t* slot) {
  constexpr int kChunksPerRow = kStageCols / 16;
#pragma unroll
  for (int j = 0; j < kTileRows * kChunksPerRow / kWarp; ++j) {
    const int c = lane + j * kWarp, r = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const uint8_t* row = w + static_cast<size_t>(min(tile * kTileRows + r, rows - 1)) * row_bytes;
    ptx::cp_async16(ptx::smem_u32(slot + r * kStageCols + 16 * swizzled(r, chunk)),
                    row + stage * kStageCols + 16 * chunk, true);
  }
  if (lane < kTileRows) {
    const uint8_t* row = w + static_cast<size_t>(min(tile * kTileRows + lane, rows - 1)) * row_bytes;
    ptx::cp_async8(ptx::smem_u32(slot + kSlotQuantBytes + lane * kStageBlocks * 2),
                   row + cols + stage * kStageBlocks * 2);
  }
}

// acc0 / acc1 (rows g / g + 8, token t4) += the staged blocks, in column order.
__device__ __forceinline__ void stage_compute(const uint8_t* slot, const uint8_t* levels, const float* scales,
                                              int stage, int g, int t4, float& acc0, float& acc1) {
  const uint2 d0w = *reinterpret_cast<const uint2*>(slot + kSlotQuantBytes + g * kStageBlocks * 2);
  const uint2 d1w = *reinterpret_cast<const uint2*>(slot + kSlotQuantBytes + (g + 8) * kStageBlocks * 2);
#pragma unroll
  for (int b = 0; b < kStageBlocks; ++b) {
    const int blk = stage * kStageBlocks + b, chunk = 2 * b + t4 / 2, half = 8 * (t4 % 2);
    const uint2 q0 = *reinterpret_cast<const uint2*>(slot + g * kStageCols + 16 * swizzled(g, chunk) + half);
    const uint2 q1 = *reinterpret_cast<const uint2*>(slot + (g + 8) * kStageCols + 16 * swizzled(g + 8, chunk) + half);
    const uint2 bx =
        *reinterpret_cast<const uint2*>(levels + static_cast<size_t>(blk) * kLevelBytes + g * kQ8Block + 8 * t4);
    const uint32_t a[4] = {q0.x, q1.x, q0.y, q1.y};
    int c[4];
    ptx::mma_s8(c, a, bx.x, bx.y, kMagic);
    const float u = scales[blk * kTokens + t4];
    const uint32_t w0 = b < 2 ? d0w.x : d0w.y, w1 = b < 2 ? d1w.x : d1w.y;
    const float d0 = half_bits_to_float(static_cast<uint16_t>(b % 2 == 0 ? w0 & 0xFFFFu : w0 >> 16));
    const float d1 = half_bits_to_float(static_cast<uint16_t>(b % 2 == 0 ? w1 & 0xFFFFu : w1 >> 16));
    const float v0 = fmaf(__int_as_float(c[0]) - kMagicF, 254.0f, __int_as_float(c[1]) - kMagicF);
    const float v1 = fmaf(__int_as_float(c[2]) - kMagicF, 254.0f, __int_as_float(c[3]) - kMagicF);
    acc0 = fmaf(v0, d0 * u, acc0);
    acc1 = fmaf(v1, d1 * u, acc1);
  }
}

// A warp's walk over its (tile, stage) items: stages warp, warp + W, ... of tiles blockIdx.x,
// blockIdx.x + gridDim.x, ...
struct Cursor {
  int tile, stage;
  __device__ __forceinline__ void advance(int first_stage, int stages, int warps) {
    stage += warps;
    if (stage >= stages) stage = first_stage, tile += static_cast<int>(gridDim.x);
  }
};

// What the kernel needs after the loads: the shape, the activations in shared memory, the tile's
// partials, the output.
struct TileSums {
  int rows, warps, warp, g, t4, n;
  const uint8_t* levels;
  const float* scales;
  float* partials;  // [2][warps][16 rows][4 tokens]
  RowSegments out;

  // The warp's sums of its stages of `tile` to the partials; once all warps have, the first 64
  // threads sum one (row, token) each in warp order and store it while the other warps go on to
  // the next tile (a tree over all warps measured slower: it holds every warp up). Double-buffered
  // by tile parity: one barrier per tile.
  __device__ __forceinline__ void finish(int tile, int parity, float acc0, float acc1) const {
    constexpr int kOutputs = kTileRows * kTokens;
    float* part = partials + (parity * warps + warp) * kOutputs;
    part[g * kTokens + t4] = acc0;
    part[(g + 8) * kTokens + t4] = acc1;
    __syncthreads();  // also orders this parity's reads before its rewrite two tiles on
    const int i = static_cast<int>(threadIdx.x);
    if (i >= kOutputs) return;
    const int r = i / kTokens, t = i % kTokens, row = tile * kTileRows + r;
    if (t >= n || row >= rows) return;
    const float* src = partials + parity * warps * kOutputs + i;
    float sum = 0.0f;
    for (int k = 0; k < warps; ++k) sum += src[k * kOutputs];
    *segment_out(out, row, t) = sum;
  }
};

// Shared memory: levels [blocks][8 columns][32], scales [blocks][4 tokens], partials, then each
// warp's ring of `ring` slots.
struct SmemLayout {
  size_t scales, partials, rings, total;
  __host__ __device__ SmemLayout(int cols, int warps, int ring) {
    const size_t blocks = static_cast<size_t>(cols) / kQ8Block;
    scales = blocks * kLevelBytes;
    partials = scales + blocks * kTokens * sizeof(float);
    rings = partials + 2 * static_cast<size_t>(warps) * kTileRows * kTokens * sizeof(float);
    total = rings + static_cast<size_t>(warps) * ring * kSlotBytes;
  }
};

__global__ void __launch_bounds__(kMaxWarps* kWarp, 1)
    gemv_q8_split_mma_kernel(const uint8_t* __restrict__ w, int rows, int cols, size_t row_bytes,
                             const float* __restrict__ x, const float* __restrict__ up, size_t xs,
                             const uint8_t* __restrict__ acts, int n, int ring, RowSegments out) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int stages = cols / kStageCols, n_tiles = (rows + kTileRows - 1) / kTileRows;
  const int warps = static_cast<int>(blockDim.x) / kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp, g = lane / 4, t4 = lane % 4;
  const SmemLayout lay(cols, warps, ring);
  const int my_tiles = n_tiles > static_cast<int>(blockIdx.x)
                           ? (n_tiles - 1 - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x) + 1
                           : 0;
  const int per_tile = (stages - 1 - warp) / warps + 1;  // warps <= stages
  const int items = my_tiles * per_tile;
  float* scales = reinterpret_cast<float*>(smem + lay.scales);
  const TileSums sums{rows, warps, warp, g, t4, n, smem, scales, reinterpret_cast<float*>(smem + lay.partials), out};
  uint8_t* my_ring = smem + lay.rings + static_cast<size_t>(warp) * ring * kSlotBytes;

  // The weights never depend on the previous kernel (launched as a programmatic dependent, this
  // may run while it finishes): the ring's first ring - 1 stages go out before the wait and the
  // activations' quantization; x does, and y may still be read by it. One commit group per item.
  Cursor ld{static_cast<int>(blockIdx.x), warp};
  const auto issue = [&](int i) {
    if (i < items) stage_copy(w, rows, cols, row_bytes, ld.tile, ld.stage, lane, my_ring + (i % ring) * kSlotBytes);
    ptx::cp_async_commit();
    ld.advance(warp, stages, warps);
  };
  for (int i = 0; i < ring - 1; ++i) issue(i);
  wait_for_previous_kernel();
  if (acts != nullptr) {
    copy_own_activations(acts, cols, per_tile, smem, scales);
  } else {
    quantize_own_activations(x, up, xs, n, per_tile, smem, scales);
  }

  float acc0 = 0.0f, acc1 = 0.0f;
  int in_tile = 0, tile = static_cast<int>(blockIdx.x), stage = warp, parity = 0;
  for (int i = 0; i < items; ++i) {
    issue(i + ring - 1);  // into the slot item i - 1 used (its readers passed the __syncwarp below)
    wait_copies_but(ring - 1);
    __syncwarp();  // every lane's copies of item i are complete and visible
    stage_compute(my_ring + (i % ring) * kSlotBytes, smem, scales, stage, g, t4, acc0, acc1);
    __syncwarp();
    stage += warps;
    if (++in_tile < per_tile) continue;
    sums.finish(tile, parity, acc0, acc1);
    acc0 = acc1 = 0.0f;
    in_tile = 0;
    stage = warp;
    tile += static_cast<int>(gridDim.x);
    parity ^= 1;
  }
  ptx::cp_async_wait<0>();  // no copy outlives the block
}

// The launch geometry of a shape: warps per block (the bits depend on it, and on the columns
// only), blocks per SM and the ring depth (the deepest of 5..2 slots a warp that fits in shared
// memory; any depth gives the same bits). Shapes (production takes 0; the kernel lab both:
// tools/kernel_lab/variants_lab.h gemv_q8_split_mma_shape):
//   0: 16 warps, one block per SM (the quantization done once per SM);
//   1: 8 warps, two blocks per SM (one block's barriers and quantization overlap the other's loads).
constexpr int kMmaShapes = 2, kDefaultMmaShape = 0;
struct Geometry {
  int warps, blocks_per_sm, ring;
  size_t smem;
};
Geometry geometry(int cols, int shape) {
  const int per_sm = shape == 1 ? 2 : 1;
  Geometry g{std::min(kMaxWarps / per_sm, cols / kStageCols), per_sm, 5, 0};
  for (; g.ring >= 2; --g.ring) {
    g.smem = SmemLayout(cols, g.warps, g.ring).total;
    if (per_sm * (g.smem + 1024) <= kSmemLimit + 1024) break;
  }
  return g;
}

RowSegments from_token(RowSegments seg, size_t t0) {
  for (int i = 0; i < seg.n; ++i) seg.y[i] += t0 * seg.ys[i];
  return seg;
}

// The GEMV in block shape `shape` (geometry above): gemv_q8_split_mma's body.
cudaError_t launch_split_mma(int shape, const cpu::WeightView& w, const float* x, const float* up, size_t xs, size_t n,
                             const RowSegments& out, cudaStream_t stream, bool pdl, void* act_scratch) {
  if (shape < 0 || shape >= kMmaShapes) return cudaErrorInvalidValue;
  if (w.cols % kStageCols != 0) return cudaErrorNotSupported;
  if (act_scratch != nullptr && reinterpret_cast<uintptr_t>(act_scratch) % 16 != 0) return cudaErrorMisalignedAddress;
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  const Geometry geo = geometry(cols, shape);  // once per call: the launch's host cost is on the decode path
  if (geo.ring < 2) return cudaErrorNotSupported;
  if (const cudaError_t e = allow_dynamic_smem<gemv_q8_split_mma_kernel>(kSmemLimit); e != cudaSuccess) return e;
  const int n_tiles = (rows + kTileRows - 1) / kTileRows;
  const int grid = std::min(n_tiles, current_device_sm_count() * geo.blocks_per_sm);
  const bool dependent = pdl && current_device_is_sm90_or_newer();
  auto* acts = static_cast<uint8_t*>(act_scratch);
  for (size_t t0 = 0; t0 < n; t0 += kTokens) {
    const int nt = static_cast<int>(std::min<size_t>(kTokens, n - t0));
    const float* xt = x + t0 * xs;
    const float* upt = up == nullptr ? nullptr : up + t0 * xs;
    if (acts != nullptr) {
      const int quad_threads = cols / kQ8Block * kTokens * 4;  // a quad of lanes per (token, 32 columns)
      const auto qgrid = static_cast<unsigned>((quad_threads + kQuantizeThreads - 1) / kQuantizeThreads);
      if (const cudaError_t e = launch_maybe_dependent(quantize_acts_kernel, dim3(qgrid), dim3(kQuantizeThreads), 0,
                                                       stream, dependent, xt, upt, xs, nt, cols, acts);
          e != cudaSuccess) {
        return e;
      }
    }
    const cudaError_t e = launch_maybe_dependent(
        gemv_q8_split_mma_kernel, dim3(static_cast<unsigned>(grid)), dim3(static_cast<unsigned>(geo.warps * kWarp)),
        geo.smem, stream, dependent, static_cast<const uint8_t*>(w.data), rows, cols, w.row_bytes, xt, upt, xs,
        static_cast<const uint8_t*>(acts), nt, geo.ring, from_token(out, t0));
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace
}  // namespace ds::cuda::detail
