// Small-batch Q8_0 product on bf16 tensor cores (see gemv_q8_mma.h).
//
// Layout: a block owns 128 rows (8 warps x one m16 tile each) and a range of "chunks" (8 Q8_0
// blocks = 256 columns = 272 bytes of a row, 16-byte aligned when the row is). All warps share
// each chunk: the block copies its 128 rows x 272 bytes into shared memory with cp.async (two
// stages), while each warp multiplies its 16 rows. Why 128 rows: every block reads the whole
// activation slice of its chunks, so the activation traffic per weight byte is ~6n / 136 per row
// tile; 128 rows keep it below the weight traffic for n <= 16. Small matrices split K across
// blocks (ksplit) so that at least two blocks per SM stream weights; the splits' partial sums
// are added in split order by a second kernel.
//
// Split rows (GgmlType::Q8_0_SPLIT, common/q8_split.h) fill the same 272-byte slot as [256 quants]
// [8 fp16 scales] (the scales of a chunk are one 16-byte piece at row + cols + 16 c); only where
// the warps read a block's quants and scale differs, so both layouts give the same bits.
//
// The activations are prepared once per call (prep kernel) as bf16 B fragments of the mma,
// three terms each, in the order the lanes read them: one 48-byte record per (Q8_0 block, 8-token
// tile, lane), read with three 16-byte loads (served by L1 for the block's other warps).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/gemv_q8_mma.h"
#include "kernels/cuda/matmul_fast.h"  // stream_workspace
#include "kernels/cuda/ptx_mma.cuh"  // pack_bf16
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * kWarp;
constexpr int kTileRows = 16, kBlockRows = kWarps * kTileRows;  // 128
constexpr int kChunkBlocks = 8;                                 // Q8_0 blocks per chunk
constexpr int kChunkBytes = kChunkBlocks * 34;                  // 272 = 17 x 16
constexpr int kChunkPieces = kChunkBytes / 16;
constexpr int kChunkCols = kChunkBlocks * 32;       // 256
constexpr int kChunkQuantPieces = kChunkCols / 16;  // split rows: 16 quant pieces, then 1 scale piece
constexpr int kStages = 2;
constexpr int kStageBytes = kBlockRows * kChunkBytes;  // 34816
constexpr int kSmemBytes = kStages * kStageBytes;      // 69632 (needs the opt-in above 48 KB)
constexpr int kRecordU4 = 3;                           // 16-byte words per (block, tile, lane) record

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_one() {
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

// Two int8 (low byte = lower column) -> two exact bf16 in one register (low half = lower column):
// byte -> float by the 2^23 trick, then the upper 16 bits (exact: |q| <= 128 has <= 8 bits).
__device__ __forceinline__ uint32_t q8x2_to_bf16x2(uint32_t two) {
  const uint32_t u = two ^ 0x8080u;
  const float f0 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440)) - 8388736.0f;
  const float f1 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7441)) - 8388736.0f;
  return __byte_perm(__float_as_uint(f0), __float_as_uint(f1), 0x7632);
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  // Not volatile: a pure function of its operands, so the compiler may hoist the next loads above it.
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- activation prep: one thread per (Q8_0 block kb, token tile nt, lane) ---------------------
// Lane (g = lane / 4, t4 = lane % 4) of tile nt needs token nt*8 + g at columns 2t4, 2t4+1 (b0)
// and 2t4+8, 2t4+9 (b1) of each 16-column k step s. Record: 6 uint2 {b0, b1}, index s*3 + term.
__global__ void prep_x_kernel(const float* __restrict__ x, size_t xs, int n, int nb, int ntiles,
                              uint4* __restrict__ xf) {
  const size_t id = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (id >= size_t(nb) * ntiles * kWarp) return;
  const int lane = static_cast<int>(id % kWarp);
  const int nt = static_cast<int>(id / kWarp % ntiles);
  const size_t kb = id / kWarp / ntiles;
  const int token = nt * 8 + lane / 4, t4 = lane % 4;
  uint32_t rec[12] = {};
  if (token < n) {
    const float* xr = x + size_t(token) * xs + kb * 32 + 2 * t4;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      float v[4] = {xr[16 * s], xr[16 * s + 1], xr[16 * s + 8], xr[16 * s + 9]};
#pragma unroll
      for (int term = 0; term < 3; ++term) {
        float head[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          head[j] = __bfloat162float(__float2bfloat16_rn(v[j]));
          v[j] -= head[j];  // exact: the remainder of a rounding to 8 significant bits
        }
        rec[2 * (s * 3 + term)] = ptx::pack_bf16(head[0], head[1]);
        rec[2 * (s * 3 + term) + 1] = ptx::pack_bf16(head[2], head[3]);
      }
    }
  }
  uint4* out = xf + id * kRecordU4;
  out[0] = make_uint4(rec[0], rec[1], rec[2], rec[3]);
  out[1] = make_uint4(rec[4], rec[5], rec[6], rec[7]);
  out[2] = make_uint4(rec[8], rec[9], rec[10], rec[11]);
}

// Copies chunk c of the block's 128 rows into `stage` (rows past the matrix re-read the last row;
// a short last chunk copies only the 16-byte pieces it covers, which stay inside row_bytes).
// kSplit: the chunk's quants and its scale piece (split matrices have whole chunks only, check()).
template <bool kSplit>
__device__ __forceinline__ void load_chunk(const uint8_t* w, int rows, size_t row_bytes, int nb, int r0, int c,
                                           uint8_t* stage) {
  const int blocks = min(kChunkBlocks, nb - c * kChunkBlocks);
  const int pieces = kSplit ? kChunkPieces : (blocks * 34 + 15) / 16;
  for (int i = threadIdx.x; i < kBlockRows * kChunkPieces; i += kThreads) {
    const int rr = i / kChunkPieces, p = i % kChunkPieces;
    if (p >= pieces) continue;
    const int r = min(r0 + rr, rows - 1);
    const uint8_t* row = w + size_t(r) * row_bytes;
    const uint8_t* src = nullptr;
    if constexpr (kSplit) {
      const size_t cols = size_t(nb) * kQ8Block;
      src = p < kChunkQuantPieces ? row + size_t(c) * kChunkCols + p * 16 : row + cols + size_t(c) * 16;
    } else {
      src = row + size_t(c) * kChunkBytes + p * 16;
    }
    cp_async16(stage + rr * kChunkBytes + p * 16, src);
  }
}

// This warp's A fragments (two k steps) and scales of Q8_0 block b of the chunk in `stage`.
struct BlockA {
  uint32_t a[2][4];
  float d_top, d_bot;  // rows g and g + 8
};

// Within a row's slot, block b's scale is at d_off and its quants at q_off: GGUF order [d][32 q]
// blocks of 34 bytes; split rows [256 q][8 d].
template <bool kSplit>
__device__ __forceinline__ BlockA load_block_a(const uint8_t* stage, int b) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  const int d_off = kSplit ? kChunkCols + 2 * b : 34 * b;
  const int q_off = kSplit ? 32 * b : 34 * b + 2;
  const uint8_t* top = stage + (warp * kTileRows + g) * kChunkBytes;  // row g
  const uint8_t* bot = top + 8 * kChunkBytes;                         // row g + 8
  BlockA m;
  m.d_top = __half2float(*reinterpret_cast<const __half*>(top + d_off));
  m.d_bot = __half2float(*reinterpret_cast<const __half*>(bot + d_off));
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int k = q_off + 16 * s + 2 * t4;
    m.a[s][0] = q8x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(top + k));
    m.a[s][1] = q8x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(bot + k));
    m.a[s][2] = q8x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(top + k + 8));
    m.a[s][3] = q8x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(bot + k + 8));
  }
  return m;
}

// acc += d * (one Q8_0 block . one token tile): 6 mma into a fresh block sum, then its scale.
// Every variant runs exactly this sequence, so they give the same bits.
__device__ __forceinline__ void block_tile(const BlockA& m, const uint4& v0, const uint4& v1, const uint4& v2,
                                           float (&acc)[4]) {
  float blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma_bf16(blk, m.a[0], v0.x, v0.y);
  mma_bf16(blk, m.a[0], v0.z, v0.w);
  mma_bf16(blk, m.a[0], v1.x, v1.y);
  mma_bf16(blk, m.a[1], v1.z, v1.w);
  mma_bf16(blk, m.a[1], v2.x, v2.y);
  mma_bf16(blk, m.a[1], v2.z, v2.w);
  acc[0] = __fmaf_rn(m.d_top, blk[0], acc[0]);
  acc[1] = __fmaf_rn(m.d_top, blk[1], acc[1]);
  acc[2] = __fmaf_rn(m.d_bot, blk[2], acc[2]);
  acc[3] = __fmaf_rn(m.d_bot, blk[3], acc[3]);
}

// The activation records of Q8_0 block kb for the (at most NT8) token tiles.
template <int NT8>
__device__ __forceinline__ void load_records(const uint4* __restrict__ xf, size_t kb, int ntiles,
                                             uint4 (&v)[NT8][kRecordU4]) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int nt = 0; nt < NT8; ++nt) {
    if (nt < ntiles) {
      const uint4* rec = xf + ((kb * ntiles + nt) * kWarp + lane) * kRecordU4;
#pragma unroll
      for (int i = 0; i < kRecordU4; ++i) v[nt][i] = __ldg(rec + i);
    }
  }
}

// acc[nt] += this warp's 16 rows x chunk c (from shared memory) . token tile nt.
// kPrefetch (variant 1): the next block's activation records are loaded before this block's mma,
// so their L2 round trip overlaps the arithmetic (v0: loaded where used; the H200 run of
// 2026-11-29 found v0 latency-bound, ~1 us per Q8_0 block per thread block). Same bits.
template <int NT8, bool kPrefetch, bool kSplit>
__device__ __forceinline__ void mma_chunk(const uint8_t* stage, int nb, int c, const uint4* __restrict__ xf, int ntiles,
                                          float (&acc)[NT8][4]) {
  const int blocks = min(kChunkBlocks, nb - c * kChunkBlocks);
  const size_t kb0 = size_t(c) * kChunkBlocks;
  if constexpr (kPrefetch) {
    uint4 cur[NT8][kRecordU4], next[NT8][kRecordU4];
    load_records<NT8>(xf, kb0, ntiles, cur);
    for (int b = 0; b < blocks; ++b) {
      if (b + 1 < blocks) load_records<NT8>(xf, kb0 + b + 1, ntiles, next);
      const BlockA m = load_block_a<kSplit>(stage, b);
#pragma unroll
      for (int nt = 0; nt < NT8; ++nt) {
        if (nt < ntiles) block_tile(m, cur[nt][0], cur[nt][1], cur[nt][2], acc[nt]);
      }
#pragma unroll
      for (int nt = 0; nt < NT8; ++nt) {
#pragma unroll
        for (int i = 0; i < kRecordU4; ++i) cur[nt][i] = next[nt][i];
      }
    }
  } else {
#pragma unroll 2  // lets the next block's activation loads overlap this block's mma
    for (int b = 0; b < blocks; ++b) {
      const BlockA m = load_block_a<kSplit>(stage, b);
      const size_t kb = kb0 + b;
#pragma unroll
      for (int nt = 0; nt < NT8; ++nt) {
        if (nt >= ntiles) break;
        const uint4* rec = xf + ((kb * ntiles + nt) * kWarp + threadIdx.x % kWarp) * kRecordU4;
        block_tile(m, __ldg(rec), __ldg(rec + 1), __ldg(rec + 2), acc[nt]);
      }
    }
  }
}

// out[t * os + r] = this block's sums (out = y when ksplit == 1, else partial row blockIdx.y).
template <int NT8, bool kPrefetch, bool kSplit>
__global__ void __launch_bounds__(kThreads)
    gemv_mma_kernel(const uint8_t* __restrict__ w, int rows, size_t row_bytes, int nb, int chunks_per_split,
                    const uint4* __restrict__ xf, int n, int ntiles, float* __restrict__ out, size_t os,
                    size_t split_stride) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int r0 = blockIdx.x * kBlockRows;
  const int n_chunks = (nb + kChunkBlocks - 1) / kChunkBlocks;
  const int c_begin = blockIdx.y * chunks_per_split;
  const int c_end = min(n_chunks, c_begin + chunks_per_split);
  float acc[NT8][4];
#pragma unroll
  for (int nt = 0; nt < NT8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

  load_chunk<kSplit>(w, rows, row_bytes, nb, r0, c_begin, smem);
  cp_async_commit();
  if (c_begin + 1 < c_end) load_chunk<kSplit>(w, rows, row_bytes, nb, r0, c_begin + 1, smem + kStageBytes);
  cp_async_commit();
  for (int c = c_begin, s = 0; c < c_end; ++c, s ^= 1) {
    cp_async_wait_one();  // chunk c's group (groups complete in order; one is always younger)
    __syncthreads();
    mma_chunk<NT8, kPrefetch, kSplit>(smem + s * kStageBytes, nb, c, xf, ntiles, acc);
    __syncthreads();  // everyone is done with stage s before it is refilled
    if (c + 2 < c_end) load_chunk<kSplit>(w, rows, row_bytes, nb, r0, c + 2, smem + s * kStageBytes);
    cp_async_commit();
  }

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  float* o = out + blockIdx.y * split_stride;
  const int r_top = r0 + warp * kTileRows + g;
#pragma unroll
  for (int nt = 0; nt < NT8; ++nt) {
    const int t = nt * 8 + 2 * t4;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = r_top + (j >= 2 ? 8 : 0), tok = t + (j & 1);
      if (r < rows && tok < n) o[size_t(tok) * os + r] = acc[nt][j];
    }
  }
}

struct Plan {
  int nb, n_chunks, row_tiles, chunks_per_split, ksplit, ntiles;
};

cudaError_t make_plan(const cpu::WeightView& w, size_t n, Plan* p) {
  const int sms = current_device_sm_count();  // cached per device: no attribute query per call
  p->nb = static_cast<int>(w.cols / kQ8Block);
  p->n_chunks = (p->nb + kChunkBlocks - 1) / kChunkBlocks;
  p->row_tiles = static_cast<int>((w.rows + kBlockRows - 1) / kBlockRows);
  // Enough blocks for two per SM; depends on the shape and the device only (batch invariance).
  const int want = std::clamp((2 * sms + p->row_tiles - 1) / p->row_tiles, 1,
                              std::min(p->n_chunks, static_cast<int>(kMmaGemvMaxSplits)));
  p->chunks_per_split = (p->n_chunks + want - 1) / want;
  p->ksplit = (p->n_chunks + p->chunks_per_split - 1) / p->chunks_per_split;
  p->ntiles = static_cast<int>((n + 7) / 8);
  return cudaSuccess;
}

template <int NT8, bool kPrefetch, bool kSplit>
cudaError_t launch(const cpu::WeightView& w, const Plan& p, const uint4* xf, size_t n, float* out, size_t os,
                   size_t split_stride, cudaStream_t stream) {
  const auto kernel = gemv_mma_kernel<NT8, kPrefetch, kSplit>;
  if (const cudaError_t e = allow_dynamic_smem<gemv_mma_kernel<NT8, kPrefetch, kSplit>>(kSmemBytes); e != cudaSuccess) {
    return e;
  }
  const dim3 grid(static_cast<unsigned>(p.row_tiles), static_cast<unsigned>(p.ksplit));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(static_cast<const uint8_t*>(w.data), static_cast<int>(w.rows),
                                                 w.row_bytes, p.nb, p.chunks_per_split, xf, static_cast<int>(n),
                                                 p.ntiles, out, os, split_stride);
  return launch_status();
}

// The prefetching variant holds two record sets in registers: only for <= 2 token tiles.
template <bool kSplit>
cudaError_t launch_layout(int variant, const cpu::WeightView& w, const Plan& p, const uint4* xf, size_t n, float* out,
                          size_t os, size_t split_stride, cudaStream_t stream) {
  if (variant == 1 && p.ntiles == 1) return launch<1, true, kSplit>(w, p, xf, n, out, os, split_stride, stream);
  if (variant == 1 && p.ntiles == 2) return launch<2, true, kSplit>(w, p, xf, n, out, os, split_stride, stream);
  if (p.ntiles == 1) return launch<1, false, kSplit>(w, p, xf, n, out, os, split_stride, stream);
  if (p.ntiles == 2) return launch<2, false, kSplit>(w, p, xf, n, out, os, split_stride, stream);
  if (p.ntiles <= 4) return launch<4, false, kSplit>(w, p, xf, n, out, os, split_stride, stream);
  return launch<8, false, kSplit>(w, p, xf, n, out, os, split_stride, stream);
}

cudaError_t launch_variant(int variant, const cpu::WeightView& w, const Plan& p, const uint4* xf, size_t n, float* out,
                           size_t os, size_t split_stride, cudaStream_t stream) {
  if (w.type == GgmlType::Q8_0_SPLIT) return launch_layout<true>(variant, w, p, xf, n, out, os, split_stride, stream);
  return launch_layout<false>(variant, w, p, xf, n, out, os, split_stride, stream);
}

cudaError_t check(const cpu::WeightView& w, const float* x, size_t xs, const float* y, size_t ys, size_t n) {
  if (!is_q8_0(w.type)) return cudaErrorNotSupported;
  if (w.data == nullptr || x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  if (!aligned_to(x, 4) || !aligned_to(y, 4)) return cudaErrorMisalignedAddress;
  if (!aligned_to(w.data, 16) || w.row_bytes % 16 != 0) return cudaErrorMisalignedAddress;
  if (w.cols % kQ8Block != 0 || w.row_bytes < w.cols / kQ8Block * kQ8BlockBytes) return cudaErrorInvalidValue;
  // Split rows: whole chunks only (a short chunk's scales would be a partial 16-byte piece).
  if (w.type == GgmlType::Q8_0_SPLIT && w.cols % kChunkCols != 0) return cudaErrorInvalidValue;
  if (n > kMmaGemvMaxTokens || (n > 1 && (xs < w.cols || ys < w.rows))) return cudaErrorInvalidValue;
  if (w.rows > (size_t{1} << 30) || w.cols > (size_t{1} << 24)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

bool gemv_q8_mma_applies(const cpu::WeightView& w, const float* x, size_t xs, const float* y, size_t ys,
                         size_t n_tokens) {
  return n_tokens >= 1 && check(w, x, xs, y, ys, n_tokens) == cudaSuccess;
}

cudaError_t gemv_q8_mma_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y,
                                size_t ys, cudaStream_t stream) {
  if (variant < 0 || variant >= kMmaGemvVariants) return cudaErrorInvalidValue;
  if (const cudaError_t e = check(w, x, xs, y, ys, n); e != cudaSuccess) return e;
  if (n == 0 || w.rows == 0 || w.cols == 0) return cudaSuccess;
  Plan p{};
  if (const cudaError_t e = make_plan(w, n, &p); e != cudaSuccess) return e;
  const size_t records = size_t(p.nb) * p.ntiles * kWarp;
  const size_t xf_bytes = records * kRecordU4 * 16;
  const size_t part_bytes = p.ksplit > 1 ? size_t(p.ksplit) * n * w.rows * sizeof(float) : 0;
  cudaError_t e = cudaSuccess;
  auto* ws = static_cast<uint8_t*>(stream_workspace(xf_bytes + part_bytes, stream, &e));
  if (ws == nullptr) return e;
  auto* xf = reinterpret_cast<uint4*>(ws);
  auto* part = reinterpret_cast<float*>(ws + xf_bytes);  // xf_bytes is a multiple of 16

  constexpr int kPrepThreads = 256;
  prep_x_kernel<<<static_cast<unsigned>((records + kPrepThreads - 1) / kPrepThreads), kPrepThreads, 0, stream>>>(
      x, xs, static_cast<int>(n), p.nb, p.ntiles, xf);
  if ((e = launch_status()) != cudaSuccess) return e;

  float* out = p.ksplit > 1 ? part : y;
  const size_t os = p.ksplit > 1 ? w.rows : ys, split_stride = n * w.rows;
  e = launch_variant(variant, w, p, xf, n, out, os, split_stride, stream);
  if (e != cudaSuccess || p.ksplit == 1) return e;
  return launch_sum_splits(part, p.ksplit, n, w.rows, RowSegments::whole(y, w.rows, ys), stream);
}

}  // namespace ds::cuda::detail
