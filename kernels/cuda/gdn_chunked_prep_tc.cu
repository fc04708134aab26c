// The chunked GDN prefill's prep on tensor cores (GdnPrep::kTensorCores, gdn_chunked.h): the v3
// prep's flow (gdn_chunked_prep.cu: same loads, same scratch records) with its 64 x 64 x 128
// pairwise products (K K^T, Q K^T) and its lower-triangular 64 x 64 times 64 x 128 products
// (W = T diag(beta e^gam) K, Ut = T diag(beta) V, P W, P Ut) as mma.sync m16n8k8 tf32 tiles with
// f32 accumulation. The triangular inverse T = (I + A)^-1 stays f32 on the CUDA cores (a 64-step
// dependent chain, small next to the products). Each of the 8 warps owns a 16-row band of the
// output and half its columns (pairwise: 32 of 64; products: 64 of 128).
//
// Rounding: each product operand is rounded to tf32 (2^-11 relative), so A, P, W, Ut and Qp carry
// ~2^-10 relative error per term before the state pass (same scale as the state pass's own;
// gdn_chunked_tc.cu explains the choice of tf32 over bf16).
//
// Shared rows: the q/k/v tiles have 132 floats (= 4 mod 32: the pairwise fragment loads, row g
// column qd of K or Q, hit banks 4g + qd, all distinct; the products' B loads, row qd column g,
// see 2-way conflicts), A/T/P rows have 68 (= 4 mod 32: A-operand loads distinct). 103 KB in all:
// two blocks per SM on sm_90 (one on sm_80's 164 KB).
#include <algorithm>

#include "kernels/cuda/gdn_chunked_common.cuh"
#include "kernels/cuda/gdn_chunked_prep_load.cuh"
#include "kernels/cuda/ptx_mma.cuh"  // tf32, mma_tf32

namespace ds::cuda::gdn_chunked_detail {
namespace {

using namespace prep_load;
using ptx::mma_tf32;
using ptx::tf32;

constexpr int kLt = 132;  // q/k/v tile rows
constexpr int kLa = 68;   // A / T / P rows
constexpr size_t kSmemFloats = PrepTiles<kLt, kLa>::kFloats;
static_assert(kSmemFloats * sizeof(float) * 2 + 2 * 1024 <= 228 * 1024, "two blocks per SM");
static_assert(kThreads / kWarp == 8, "8 warps: 4 row bands x 2 column halves");

struct Lane {
  int warp, g, qd;
  __device__ Lane()
      : warp(static_cast<int>(threadIdx.x) / kWarp),
        g(static_cast<int>(threadIdx.x) % kWarp / 4),
        qd(static_cast<int>(threadIdx.x) % 4) {}
  __device__ int r0() const { return (warp % 4) * 16; }  // the warp's row band
};

// kk = K K^T and qk = Q K^T over the warp's rows and 32 columns, then the masks: As = strictly
// lower beta_r e^(gam_r - gam_c) kk (to shared memory), P = lower e^(gam_r - gam_c) qk (kept in
// the fragment registers, P[nt] = n8 tile nt of the warp's columns).
__device__ void pairwise_tc(const float* Ks, const float* Qs, const float* gam, const float* bet, float* As,
                            float P[4][4]) {
  const Lane ln;
  const int r0 = ln.r0(), c0 = (ln.warp / 4) * 32;
  float kk[4][4] = {}, qk[4][4] = {};
  const float* ka = Ks + (r0 + ln.g) * kLt + ln.qd;
  const float* qa = Qs + (r0 + ln.g) * kLt + ln.qd;
  const float* kb = Ks + (c0 + ln.g) * kLt + ln.qd;  // B[i][c] = K[c][i]
#pragma unroll 4
  for (int k0 = 0; k0 < kD; k0 += 8) {
    const uint32_t af[4] = {tf32(ka[k0]), tf32(ka[8 * kLt + k0]), tf32(ka[k0 + 4]), tf32(ka[8 * kLt + k0 + 4])};
    const uint32_t qf[4] = {tf32(qa[k0]), tf32(qa[8 * kLt + k0]), tf32(qa[k0 + 4]), tf32(qa[8 * kLt + k0 + 4])};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const uint32_t b0 = tf32(kb[nt * 8 * kLt + k0]), b1 = tf32(kb[nt * 8 * kLt + k0 + 4]);
      mma_tf32(kk[nt], af, b0, b1);
      mma_tf32(qk[nt], qf, b0, b1);
    }
  }
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = r0 + ln.g + 8 * (e / 2), c = c0 + nt * 8 + 2 * ln.qd + e % 2;
      const float m = c <= r ? expf(gam[r] - gam[c]) : 0.0f;  // masked before exp: exponents <= 0
      As[r * kLa + c] = c < r ? bet[r] * kk[nt][e] * m : 0.0f;
      P[nt][e] = qk[nt][e] * m;
    }
}

__device__ void store_p_tc(const float P[4][4], float* Ps) {
  const Lane ln;
  const int r0 = ln.r0(), c0 = (ln.warp / 4) * 32;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) Ps[(r0 + ln.g + 8 * (e / 2)) * kLa + c0 + nt * 8 + 2 * ln.qd + e % 2] = P[nt][e];
}

// acc = Lm X over the warp's 16 rows and 64 columns (n8 tile nt: columns c0 + 8 nt), Lm lower
// triangular (zero above the diagonal, so k stops after the band's last row).
__device__ void lower_times_tc(const float* Lm, const float* X, float acc[8][4]) {
  const Lane ln;
  const int r0 = ln.r0(), c0 = (ln.warp / 4) * 64;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
  const float* la = Lm + (r0 + ln.g) * kLa + ln.qd;
  const float* xb = X + ln.qd * kLt + c0 + ln.g;
  for (int k0 = 0; k0 < r0 + 16; k0 += 8) {
    const uint32_t af[4] = {tf32(la[k0]), tf32(la[8 * kLa + k0]), tf32(la[k0 + 4]), tf32(la[8 * kLa + k0 + 4])};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      mma_tf32(acc[nt], af, tf32(xb[k0 * kLt + nt * 8]), tf32(xb[(k0 + 4) * kLt + nt * 8]));
    }
  }
}

// Element (row, column) of fragment entry (nt, e) of lower_times_tc's result.
__device__ __forceinline__ int frag_row(const Lane& ln, int e) {
  return ln.r0() + ln.g + 8 * (e / 2);
}
__device__ __forceinline__ int frag_col(const Lane& ln, int nt, int e) {
  return (ln.warp / 4) * 64 + nt * 8 + 2 * ln.qd + e % 2;
}

// acc to rows of `ld` floats (shared tile or scratch record; ld even and dst 8-byte aligned), a
// float2 per row pair (entries e, e + 1 are adjacent columns).
__device__ void store_frag(const float acc[8][4], float* dst, int ld) {
  const Lane ln;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      *reinterpret_cast<float2*>(dst + frag_row(ln, e) * ld + frag_col(ln, nt, e)) =
          make_float2(acc[nt][e], acc[nt][e + 1]);
    }
}

__global__ void __launch_bounds__(kThreads, 2) prep_tc_kernel(Args a) {
  extern __shared__ float smem[];
  const auto [Ks, QVs, As, Ts, gam, bet] = carve_prep_tiles<kLt, kLa>(smem);
  const auto [t0, L, n, rec] = this_prep_chunk(a);

  load_gates(a, t0, L, n, gam, bet);
  load_qk<kLt>(a, t0, L, n, rec, gam, Ks, QVs);
  __syncthreads();  // k and q tiles complete
  float P[4][4];
  pairwise_tc(Ks, QVs, gam, bet, As, P);
  load_v_scale_k<kLt>(a, t0, L, n, gam, bet, Ks, QVs);  // its barrier also completes A
  invert_unit_lower<kLa>(As, Ts);
  __syncthreads();  // T complete, A no longer read; scaled k and v in place
  store_p_tc(P, As);
  float acc[8][4];
  lower_times_tc(Ts, Ks, acc);  // W = T diag(beta e^gam) K
  __syncthreads();              // every read of the scaled k done
  store_frag(acc, Ks, kLt);
  store_frag(acc, a.sc.W + rec * kC * kD, kD);
  lower_times_tc(Ts, QVs, acc);  // Ut = T diag(beta) V
  __syncthreads();               // every read of the scaled v done; W and P in shared memory
  store_frag(acc, QVs, kLt);
  store_frag(acc, a.sc.Ut + rec * kC * kD, kD);
  __syncthreads();  // Ut in shared memory

  // Qp = e^gam Q - P W: the first term was written by this block in load_qk (visible to the
  // whole block after the barriers since).
  float* Qp = a.sc.Qp + rec * kC * kD;
  lower_times_tc(As, Ks, acc);
  const Lane ln;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const float2 eq = *reinterpret_cast<const float2*>(Qp + frag_row(ln, e) * kD + frag_col(ln, nt, e));
      acc[nt][e] = eq.x - acc[nt][e];
      acc[nt][e + 1] = eq.y - acc[nt][e + 1];
    }
  store_frag(acc, Qp, kD);
  lower_times_tc(As, QVs, acc);  // Op = P Ut
  store_frag(acc, a.sc.Op + rec * kC * kD, kD);
  if (threadIdx.x == 0) a.sc.gl[rec] = gam[kC - 1];
}

}  // namespace

cudaError_t launch_prep_tc(const Args& a, size_t n_chunks, cudaStream_t stream) {
  return launch_prep_kernel(prep_tc_kernel, kSmemFloats * sizeof(float), a, n_chunks, stream);
}

}  // namespace ds::cuda::gdn_chunked_detail
