// Internal: the kernel and launch templates of the GGUF-order decode GEMV (gemv_q8.cu explains
// the layout), shared by the production launcher (gemv_q8.cu: launch shapes 0 and 1) and the
// kernel lab (tools/kernel_lab/variants_lab.cu: every shape). Each includer gets its own copy.
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul_fast.h"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {
namespace {

constexpr int kRowsPerBlock = kWarp;
constexpr int kQuadWords = 17;  // 8-byte words per quad
static_assert(kWarp * kQuadWords == 544, "one quad of all 32 rows is 544 words, 17 per lane");
constexpr int kRowStride32 = 35;            // shared row stride in 4-byte words (odd: no bank conflicts)
constexpr size_t kQuadCols = 4 * kQ8Block;  // 128

// Byte offsets (from the block's first row, quad 0) of the words lane L copies: words L, L+32,
// ... of the 544 (word i = row i / 17, word i % 17 of that row's quad). Rows past the end
// re-read the last row (never stored). 32-bit: 32 rows of a row are far below 4 GiB.
__device__ __forceinline__ void piece_offsets(size_t rows, size_t row_bytes, size_t r0, int lane,
                                              uint32_t (&offs)[kQuadWords]) {
  const int last = static_cast<int>(min(rows - 1 - r0, size_t{kRowsPerBlock - 1}));
#pragma unroll
  for (int k = 0; k < kQuadWords; ++k) {
    const int i = lane + kWarp * k;
    offs[k] = static_cast<uint32_t>(min(i / kQuadWords, last)) * static_cast<uint32_t>(row_bytes) +
              static_cast<uint32_t>(8 * (i % kQuadWords));
  }
}

// Issues the loads of one quad of the block's 32 rows (`base` = row r0, start of the quad).
__device__ __forceinline__ void load_piece(const uint8_t* base, const uint32_t (&offs)[kQuadWords],
                                           uint64_t (&regs)[kQuadWords]) {
#pragma unroll
  for (int k = 0; k < kQuadWords; ++k) regs[k] = __ldcs(reinterpret_cast<const unsigned long long*>(base + offs[k]));
}

__device__ __forceinline__ void store_piece(uint32_t* sm, int lane, const uint64_t (&regs)[kQuadWords]) {
#pragma unroll
  for (int k = 0; k < kQuadWords; ++k) {
    const int i = lane + kWarp * k;
    uint32_t* dst = sm + (i / kQuadWords) * kRowStride32 + 2 * (i % kQuadWords);
    dst[0] = static_cast<uint32_t>(regs[k]);
    dst[1] = static_cast<uint32_t>(regs[k] >> 32);
  }
}

// One quad's activations: lane L holds x[t][c0 + 4L .. c0 + 4L + 4) for the n tokens.
template <int NT>
__device__ __forceinline__ void load_x(const float* __restrict__ x, size_t xs, size_t c0, int n, int lane,
                                       float4 (&xr)[NT]) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t < n) xr[t] = __ldg(reinterpret_cast<const float4*>(x + t * xs + c0) + lane);
  }
}

template <int NT>
__device__ __forceinline__ void store_x(float* xsm, int lane, const float4 (&xr)[NT]) {
#pragma unroll
  for (int t = 0; t < NT; ++t) reinterpret_cast<float4*>(xsm + t * kQuadCols)[lane] = xr[t];
}

// acc[t] += d * (32 quants qw . xq[t][0 .. 32)), the block's products summed first. xq is in
// shared memory (stride kQuadCols per token) and read as warp-wide broadcasts.
template <int NT>
__device__ __forceinline__ void dot_block(float d, const uint32_t (&qw)[8], const float* xq, int n, float (&acc)[NT]) {
  float s[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) s[t] = 0.0f;
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    float f[4];
    widen_int8x4(qw[m], f);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < n) {
        const float4 v = *reinterpret_cast<const float4*>(xq + t * kQuadCols + 4 * m);
        s[t] += f[0] * v.x;
        s[t] += f[1] * v.y;
        s[t] += f[2] * v.z;
        s[t] += f[3] * v.w;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] += d * s[t];
}

// acc[t] += row quad (34 words at wd) . xsm[t][0 .. 128). The quad is two 68-byte halves of
// two blocks each.
template <int NT>
__device__ __forceinline__ void dot_quad(const uint32_t* wd, const float* xsm, int n, float (&acc)[NT]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint32_t* hw = wd + 17 * half;
    uint32_t qw[8];
    // First block at a word boundary: scale | q0 q1, q2..q29, q30 q31 | next scale.
    float d = half_bits_to_float(static_cast<uint16_t>(hw[0] & 0xFFFFu));
#pragma unroll
    for (int m = 0; m < 8; ++m) qw[m] = __funnelshift_r(hw[m], hw[m + 1], 16);
    dot_block<NT>(d, qw, xsm + 64 * half, n, acc);
    // Second block: scale in the high half of word 8, quants word aligned after it.
    d = half_bits_to_float(static_cast<uint16_t>(hw[8] >> 16));
#pragma unroll
    for (int m = 0; m < 8; ++m) qw[m] = hw[9 + m];
    dot_block<NT>(d, qw, xsm + 64 * half + 32, n, acc);
  }
}

// Shared memory of one warp: 32 staged rows, then the quad's activations for NT tokens.
constexpr int kRowWords = kRowsPerBlock * kRowStride32;  // 1120 words = 4480 bytes (16-byte multiple)
template <int NT>
constexpr int warp_words() {
  return kRowWords + NT * static_cast<int>(kQuadCols);
}

// W warps per block split the quads; each keeps D quads of loads in flight (register ring,
// unrolled so the ring is indexed by constants); MinB blocks per SM bound the registers.
template <int W, int D, int MinB, int NT>
__global__ void __launch_bounds__(W* kWarp, MinB)
    gemv_q8_kernel(const uint8_t* __restrict__ w, size_t rows, size_t cols, size_t row_bytes,
                   const float* __restrict__ x, size_t xs, int n, float* __restrict__ y, size_t ys) {
  static_assert(W * warp_words<NT>() * 4 <= 200 * 1024, "shared memory of one block");
  static_assert(W * NT * kRowsPerBlock <= W * warp_words<NT>(), "partials alias the staging");
  extern __shared__ __align__(16) uint32_t smem[];  // W * warp_words<NT>() words (launch)
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  uint32_t* wsm = smem + warp * warp_words<NT>();
  float* xsm = reinterpret_cast<float*>(wsm + kRowWords);
  const size_t r0 = size_t{blockIdx.x} * kRowsPerBlock;
  const size_t n_quads = cols / kQuadCols;
  const size_t mine = n_quads > static_cast<size_t>(warp) ? (n_quads - warp + W - 1) / W : 0;  // quads warp + W*j
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;

  uint32_t offs[kQuadWords];
  piece_offsets(rows, row_bytes, r0, lane, offs);
  const uint8_t* block_rows = w + r0 * row_bytes;
  const auto quad_at = [&](size_t q) { return block_rows + q * (kQuadWords * 8); };
  uint64_t regs[D][kQuadWords];
  float4 xr[D][NT];
#pragma unroll
  for (int b = 0; b < D; ++b) {
    if (static_cast<size_t>(b) < mine) {
      const size_t q = warp + size_t{W} * b;
      load_piece(quad_at(q), offs, regs[b]);
      load_x<NT>(x, xs, q * kQuadCols, n, lane, xr[b]);
    }
  }
  for (size_t j = 0; j < mine; j += D) {
#pragma unroll
    for (int b = 0; b < D; ++b) {
      if (j + b < mine) {
        __syncwarp();  // every lane has finished reading the previous quad
        store_piece(wsm, lane, regs[b]);
        store_x<NT>(xsm, lane, xr[b]);
        __syncwarp();
        if (j + b + D < mine) {  // the ring slot refills while this quad is computed
          const size_t q = warp + size_t{W} * (j + b + D);
          load_piece(quad_at(q), offs, regs[b]);
          load_x<NT>(x, xs, q * kQuadCols, n, lane, xr[b]);
        }
        dot_quad<NT>(wsm + lane * kRowStride32, xsm, n, acc);
      }
    }
  }
  __syncthreads();                                  // the staging is reused for the partials
  float* partial = reinterpret_cast<float*>(smem);  // [W][NT][32]
#pragma unroll
  for (int t = 0; t < NT; ++t) partial[(warp * NT + t) * kRowsPerBlock + lane] = acc[t];
  __syncthreads();
  // Thread (t, row) adds the W warps' partials in warp order.
  for (int i = static_cast<int>(threadIdx.x); i < NT * kRowsPerBlock; i += W * kWarp) {
    const int t = i / kRowsPerBlock, row = i % kRowsPerBlock;
    if (t >= n || r0 + row >= rows) continue;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < W; ++k) sum += partial[(k * NT + t) * kRowsPerBlock + row];
    y[t * ys + r0 + row] = sum;
  }
}

template <int W, int D, int MinB, int NT>
cudaError_t launch(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys, cudaStream_t s) {
  constexpr int kBytes = W * warp_words<NT>() * 4;
  if constexpr (kBytes > 48 * 1024) {  // above the default limit: opt in (per device, so every launch)
    const cudaError_t e =
        cudaFuncSetAttribute(gemv_q8_kernel<W, D, MinB, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    if (e != cudaSuccess) return e;
  }
  const unsigned grid = static_cast<unsigned>((w.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  gemv_q8_kernel<W, D, MinB, NT><<<grid, W * kWarp, kBytes, s>>>(static_cast<const uint8_t*>(w.data), w.rows, w.cols,
                                                                 w.row_bytes, x, xs, static_cast<int>(n), y, ys);
  return cudaGetLastError();
}

// 4 or 8 tokens: at most 4 warps a block (their activation staging must fit in 48 KB).
template <int W, int D, int MinB>
cudaError_t launch_tokens(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                          cudaStream_t s) {
  constexpr int kWideW = W < 4 ? W : 4;
  constexpr int kWideMinB = MinB * W / kWideW > 4 ? 4 : MinB * W / kWideW;
  if (n == 1) return launch<W, D, MinB, 1>(w, x, xs, n, y, ys, s);
  if (n == 2) return launch<W, D, MinB, 2>(w, x, xs, n, y, ys, s);
  if (n <= 4) return launch<kWideW, D, kWideMinB, 4>(w, x, xs, n, y, ys, s);
  return launch<kWideW, D, kWideMinB, 8>(w, x, xs, n, y, ys, s);
}

}  // namespace
}  // namespace ds::cuda::detail
