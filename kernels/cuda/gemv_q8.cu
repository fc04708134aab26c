// Decode GEMV for Q8_0 weights (see matmul_fast.h). Each warp owns kRows consecutive rows. A row is
// walked in pieces of 32 "quads" (4 blocks = 128 weights = 136 bytes = 17 eight-byte words; a quad
// boundary is 8-byte aligned whenever the row is): the warp copies a piece with fully coalesced
// 8-byte loads into its own shared memory, then lane L dots quad L (its 136 bytes, read with a
// fixed compile-time layout) with the activations. Quants are widened exactly (byte -> float by
// the 2^23 trick), summed per block in f32 and scaled by the block's d, as sum_i (d q_i) x_i
// would be up to rounding order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul_fast.h"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {
namespace {

constexpr int kWarpsPerBlock = 4, kRows = 2;
constexpr int kQuadWords = 17;                   // 8-byte words per quad
constexpr int kPieceWords = kWarp * kQuadWords;  // 544 words = 4352 bytes
constexpr size_t kQuadCols = 4 * kQ8Block;       // 128

// Four int8 in a word -> four exact floats (PRMT + FADD instead of the quarter-rate I2F).
__device__ __forceinline__ void widen4(uint32_t w, float* f) {
  const uint32_t u = w ^ 0x80808080u;  // biased to unsigned
#pragma unroll
  for (int k = 0; k < 4; ++k) f[k] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u + k)) - 8388736.0f;
}

template <int NT>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    gemv_q8_kernel(const uint8_t* __restrict__ w, size_t rows, size_t cols, size_t row_bytes,
                   const float* __restrict__ x, size_t xs, size_t n, float* __restrict__ y, size_t ys) {
  __shared__ uint64_t sm[kWarpsPerBlock][kRows][kPieceWords];
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const size_t r0 = (size_t{blockIdx.x} * kWarpsPerBlock + warp) * kRows;
  if (r0 >= rows) return;
  float acc[kRows][NT];
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[i][t] = 0.0f;

  const size_t n_quads = cols / kQuadCols;
  for (size_t q0 = 0; q0 < n_quads; q0 += kWarp) {
    const int nq = static_cast<int>(min(size_t{kWarp}, n_quads - q0));
    const int n_words = nq * kQuadWords;
    uint64_t tmp[kRows][kQuadWords];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const size_t r = min(r0 + i, rows - 1);  // rows past the end re-read the last one, never stored
      const auto* src = reinterpret_cast<const uint64_t*>(w + r * row_bytes + q0 * (kQuadWords * 8));
#pragma unroll
      for (int k = 0; k < kQuadWords; ++k) {
        const int idx = lane + kWarp * k;
        tmp[i][k] = idx < n_words ? __ldcs(reinterpret_cast<const unsigned long long*>(src) + idx) : 0ull;
      }
    }
    __syncwarp();  // the previous piece has been read by every lane
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int k = 0; k < kQuadWords; ++k) sm[warp][i][lane + kWarp * k] = tmp[i][k];
    __syncwarp();
    if (lane < nq) {
      const size_t col0 = (q0 + lane) * kQuadCols;
#pragma unroll
      for (int bb = 0; bb < 4; ++bb) {
        float qf[kRows][32], d[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          const auto* wd = reinterpret_cast<const uint32_t*>(&sm[warp][i][lane * kQuadWords]);  // 34 words
          const int base = 17 * (bb / 2);
          uint32_t qw[8];
          if (bb % 2 == 0) {  // block at a word boundary: scale | q0 q1, q2..q29, q30 q31 | next scale
            d[i] = half_bits_to_float(static_cast<uint16_t>(wd[base] & 0xFFFFu));
#pragma unroll
            for (int m = 0; m < 8; ++m) qw[m] = __funnelshift_r(wd[base + m], wd[base + m + 1], 16);
          } else {  // scale in the high half of word base + 8, quants word aligned after it
            d[i] = half_bits_to_float(static_cast<uint16_t>(wd[base + 8] >> 16));
#pragma unroll
            for (int m = 0; m < 8; ++m) qw[m] = wd[base + 9 + m];
          }
#pragma unroll
          for (int m = 0; m < 8; ++m) widen4(qw[m], &qf[i][4 * m]);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t < static_cast<int>(n)) {
            const auto* xv = reinterpret_cast<const float4*>(x + t * xs + col0 + 32 * bb);
            float s[kRows];
#pragma unroll
            for (int i = 0; i < kRows; ++i) s[i] = 0.0f;
#pragma unroll
            for (int m = 0; m < 8; ++m) {
              const float4 v = __ldg(xv + m);
#pragma unroll
              for (int i = 0; i < kRows; ++i) {
                s[i] += qf[i][4 * m] * v.x;
                s[i] += qf[i][4 * m + 1] * v.y;
                s[i] += qf[i][4 * m + 2] * v.z;
                s[i] += qf[i][4 * m + 3] * v.w;
              }
            }
#pragma unroll
            for (int i = 0; i < kRows; ++i) acc[i][t] += d[i] * s[i];
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float sum = warp_sum(acc[i][t]);
      if (lane == 0 && t < static_cast<int>(n) && r0 + i < rows) y[t * ys + r0 + i] = sum;
    }
  }
}

template <int NT>
void launch(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys, cudaStream_t s) {
  const size_t rows_per_block = size_t{kWarpsPerBlock} * kRows;
  const unsigned grid = static_cast<unsigned>((w.rows + rows_per_block - 1) / rows_per_block);
  gemv_q8_kernel<NT><<<grid, kWarpsPerBlock * kWarp, 0, s>>>(static_cast<const uint8_t*>(w.data), w.rows, w.cols,
                                                             w.row_bytes, x, xs, n, y, ys);
}

}  // namespace

bool gemv_q8_applies(const cpu::WeightView& w, const float* x, size_t xs, size_t n_tokens) {
  return w.type == GgmlType::Q8_0 && n_tokens >= 1 && n_tokens <= 8 && w.cols % kQuadCols == 0 &&
         aligned_to(w.data, 8) && w.row_bytes % 8 == 0 && aligned_to(x, 16) && (n_tokens == 1 || xs % 4 == 0);
}

cudaError_t gemv_q8(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                    cudaStream_t stream) {
  if (n == 1) {
    launch<1>(w, x, xs, n, y, ys, stream);
  } else if (n == 2) {
    launch<2>(w, x, xs, n, y, ys, stream);
  } else if (n <= 4) {
    launch<4>(w, x, xs, n, y, ys, stream);
  } else {
    launch<8>(w, x, xs, n, y, ys, stream);
  }
  return cudaGetLastError();
}

}  // namespace ds::cuda::detail
