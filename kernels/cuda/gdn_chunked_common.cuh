// Internals shared by the chunked GDN prefill's kernels (gdn_chunked.cu: the v2 prep and the
// state pass; gdn_chunked_prep.cu: the v3 prep). Not a public header: only those two files include it.
#pragma once

#include <cstddef>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gdn_chunked.h"

namespace ds::cuda::gdn_chunked_detail {

using detail::kWarp;

constexpr int kC = static_cast<int>(kGdnChunk);             // tokens per chunk
constexpr int kMaxD = static_cast<int>(kGdnChunkedMaxDim);  // dk, dv bound
constexpr int kThreads = 256;
constexpr int kLdk = kMaxD + 1;  // padded rows of the prep kernel: column walks hit distinct banks
constexpr int kLdc = kC + 1;
constexpr int kSlab = 32;       // value columns per state-pass block
constexpr int kLx = kMaxD + 4;  // state pass: 16-byte rows, consecutive rows 4 banks apart
constexpr int kLs = kSlab + 4;

// Per-segment scratch, one record per (chunk, value head), written by the prep kernel:
//   W  = T diag(beta e^gam) K            [kC][dk]   (U = Ut - W S0)
//   Qp = diag(e^gam) Q - P W             [kC][dk]   (O = Op + Qp S0, with P U folded in)
//   Kd = diag(e^(gam_L - gam)) K         [kC][dk]   (S1 = e^gam_L S0 + Kd^T U)
//   Ut = T diag(beta) V                  [kC][dv]
//   Op = P Ut                            [kC][dv]
//   gl = gam_L                           [1]
// Records are chunk-major (index = chunk * nv + head); each array is its own region.
struct Scratch {
  float *W, *Qp, *Kd, *Ut, *Op, *gl;
};

struct Args {
  GdnShape s;
  const float *q, *k, *v, *g, *beta;
  float* state;
  float* out;
  float q_scale;
  size_t t0;  // first token of the segment
  Scratch sc;
};

constexpr size_t kPrepSmemFloats = 3 * kC * kLdk + 2 * kC * kLdc + 2 * kC;
constexpr size_t kStateSmemFloats = 2 * kC * kLx + kC * kLx + kMaxD * kLs + kC * kLs;

__device__ __forceinline__ size_t record(const Args& a, size_t chunk, size_t n) {
  return chunk * a.s.n_v_heads + n;
}

// ---- prep building blocks (256 threads, the v2 and v3 prep kernels) --------------------------

// A (strictly lower) to shared memory; P (lower with the diagonal) kept in registers: 4x4 each.
__device__ inline void pairwise(size_t dk, const float* Ks, const float* Qs, const float* gam, const float* bet,
                                float* As, float P[4][4]) {
  const int ty = static_cast<int>(threadIdx.x) / 16, tx = static_cast<int>(threadIdx.x) % 16;
  float kk[4][4] = {}, qk[4][4] = {};
  for (size_t i = 0; i < dk; ++i) {
    float kr[4], qr[4], kc[4];
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      kr[x] = Ks[(ty * 4 + x) * kLdk + i];
      qr[x] = Qs[(ty * 4 + x) * kLdk + i];
      kc[x] = Ks[(tx * 4 + x) * kLdk + i];
    }
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y) {
        kk[x][y] += kr[x] * kc[y];
        qk[x][y] += qr[x] * kc[y];
      }
  }
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const int r = ty * 4 + x;
#pragma unroll
    for (int y = 0; y < 4; ++y) {
      const int c = tx * 4 + y;
      const float m = c <= r ? expf(gam[r] - gam[c]) : 0.0f;  // masked before exp: exponents <= 0
      As[r * kLdc + c] = c < r ? bet[r] * kk[x][y] * m : 0.0f;
      P[x][y] = qk[x][y] * m;
    }
  }
}

__device__ inline void store_p(const float P[4][4], float* Ps) {
  const int ty = static_cast<int>(threadIdx.x) / 16, tx = static_cast<int>(threadIdx.x) % 16;
#pragma unroll
  for (int x = 0; x < 4; ++x)
#pragma unroll
    for (int y = 0; y < 4; ++y) Ps[(ty * 4 + x) * kLdc + tx * 4 + y] = P[x][y];
}

// T = (I + A)^-1 (unit lower triangular). Column j only depends on column j:
// T[r][j] = -sum_{s=j}^{r-1} A[r][s] T[s][j]; four lanes share a column and split the sum.
template <int kLd = kLdc>  // row stride of As and Ts
__device__ inline void invert_unit_lower(const float* As, float* Ts) {
  const int j = static_cast<int>(threadIdx.x) / 4, part = static_cast<int>(threadIdx.x) % 4;
  if (part == 0) {
    for (int r = 0; r < kC; ++r) Ts[r * kLd + j] = r == j ? 1.0f : 0.0f;
  }
  __syncwarp();
  for (int r = 1; r < kC; ++r) {  // every lane runs every r so the shuffles stay convergent
    float sum = 0.0f;
    for (int s = j + part; s < r; s += 4) sum += As[r * kLd + s] * Ts[s * kLd + j];
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
    if (part == 0 && r > j) Ts[r * kLd + j] = -sum;
    __syncwarp();
  }
}

// acc[x][b] = sum_{s<=r} L[r][s] X[s][c] with r = ty*4 + x, c = tx + 16 b (L lower triangular,
// zero above the diagonal; X rows of kLdk floats).
__device__ inline void lower_times(const float* Lm, const float* X, float acc[4][kMaxD / 16]) {
  const int ty = static_cast<int>(threadIdx.x) / 16, tx = static_cast<int>(threadIdx.x) % 16;
#pragma unroll
  for (int x = 0; x < 4; ++x)
#pragma unroll
    for (int b = 0; b < kMaxD / 16; ++b) acc[x][b] = 0.0f;
  const int last = ty * 4 + 3;
  for (int s = 0; s <= last; ++s) {
    float t[4];
#pragma unroll
    for (int x = 0; x < 4; ++x) t[x] = Lm[(ty * 4 + x) * kLdc + s];
#pragma unroll
    for (int b = 0; b < kMaxD / 16; ++b) {
      const float xv = X[s * kLdk + tx + 16 * b];
#pragma unroll
      for (int x = 0; x < 4; ++x) acc[x][b] += t[x] * xv;
    }
  }
}

// Writes a lower_times result ([kC][width], same thread mapping) to rows of `ld` floats.
__device__ inline void store_tile(const float acc[4][kMaxD / 16], size_t width, float* dst, size_t ld) {
  const int ty = static_cast<int>(threadIdx.x) / 16, tx = static_cast<int>(threadIdx.x) % 16;
#pragma unroll
  for (int x = 0; x < 4; ++x)
#pragma unroll
    for (int b = 0; b < kMaxD / 16; ++b) {
      const size_t c = tx + 16 * b;
      if (c < width) dst[(ty * 4 + x) * ld + c] = acc[x][b];
    }
}

// The v3 prep (gdn_chunked_prep.cu): whether it takes this call (dk = dv = 128, 16-byte aligned
// q/k/v rows), and its launch over the segment's `n_chunks` chunks.
bool prep_v3_applies(const Args& a);
cudaError_t launch_prep_v3(const Args& a, size_t n_chunks, cudaStream_t stream);
// The tensor-core prep (gdn_chunked_prep_tc.cu, GdnPrep::kTensorCores): takes what v3 takes.
cudaError_t launch_prep_tc(const Args& a, size_t n_chunks, cudaStream_t stream);

// The tensor-core state pass (gdn_chunked_tc.cu, GdnMath::kTensorCores): whether it takes this
// call (dk = dv = 128, `out` 8-byte aligned), and its launch over the segment's chunks with
// `slab` value columns per block (32 or 64; 0: chosen from the device's SM count).
bool state_tc_applies(const Args& a);
cudaError_t launch_state_tc(const Args& a, size_t n_chunks, int slab, cudaStream_t stream);

}  // namespace ds::cuda::gdn_chunked_detail
