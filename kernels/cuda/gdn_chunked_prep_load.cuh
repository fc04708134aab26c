// Loads shared by the chunked GDN prefill's v3 prep (gdn_chunked_prep.cu) and its tensor-core
// prep (gdn_chunked_prep_tc.cu): gates, then q/k (with Kd and Qp's e^gam Q term written straight
// from the loaded registers), then v, for dk = dv = 128 and 16-byte aligned rows. Shared tiles
// have rows of kLd floats (each kernel pads them for its own access pattern). Not a public header.
#pragma once

#include <algorithm>

#include "kernels/cuda/gdn_chunked_common.cuh"

namespace ds::cuda::gdn_chunked_detail::prep_load {

constexpr int kD = 128;                        // dk = dv
constexpr int kVec = kD / 4;                   // float4 per row: one warp per row
constexpr int kRowsPerPass = kThreads / kVec;  // 8 rows per pass of the block
constexpr int kPasses = kC / kRowsPerPass;     // 8 passes cover the chunk

// A prep block's shared memory: two q/k/v tiles with rows of kLdTile floats (Ks: k, then
// diag(beta e^gam) k, then W; QVs: q / sqrt(dk), then diag(beta) v, then Ut), two chunk-square
// tiles with rows of kLdSq floats (As: A, then P; Ts: T) and the chunk's gates.
template <int kLdTile, int kLdSq>
struct PrepTiles {
  static constexpr size_t kFloats = 2 * kC * kLdTile + 2 * kC * kLdSq + 2 * kC;
  float* Ks;
  float* QVs;
  float* As;
  float* Ts;
  float* gam;  // [kC]
  float* bet;  // [kC]
};

template <int kLdTile, int kLdSq>
__device__ __forceinline__ PrepTiles<kLdTile, kLdSq> carve_prep_tiles(float* smem) {
  PrepTiles<kLdTile, kLdSq> t;
  t.Ks = smem;
  t.QVs = t.Ks + kC * kLdTile;
  t.As = t.QVs + kC * kLdTile;
  t.Ts = t.As + kC * kLdSq;
  t.gam = t.Ts + kC * kLdSq;
  t.bet = t.gam + kC;
  return t;
}

// The chunk this block prepares (grid: chunk x value head): its first token, its length (<= kC,
// the last chunk may be short), its value head and its scratch record.
struct PrepChunk {
  size_t t0;
  int L;
  size_t n;
  size_t rec;
};

__device__ __forceinline__ PrepChunk this_prep_chunk(const Args& a) {
  const size_t chunk = blockIdx.x, n = blockIdx.y;
  const size_t t0 = a.t0 + chunk * kC;
  return PrepChunk{t0, static_cast<int>(std::min<size_t>(kC, a.s.n_tokens - t0)), n, record(a, chunk, n)};
}

// float4 `c4` of row r (stride floats apart from `base`), zero past the chunk's L rows.
__device__ __forceinline__ float4 load_row4(const float* base, size_t stride, int r, int L, int c4) {
  if (r >= L) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  return *reinterpret_cast<const float4*>(base + r * stride + 4 * c4);
}

// Padded shared rows (kLd floats) are not 16-byte aligned: four scalar stores.
__device__ __forceinline__ void put4(float* row, int c4, float4 v) {
  row[4 * c4] = v.x;
  row[4 * c4 + 1] = v.y;
  row[4 * c4 + 2] = v.z;
  row[4 * c4 + 3] = v.w;
}

__device__ __forceinline__ float4 scale4(float4 v, float f) {
  return make_float4(v.x * f, v.y * f, v.z * f, v.w * f);
}

// gam = cumsum(g) (sequential, in the CPU's order; padded rows add 0), bet = beta.
__device__ inline void load_gates(const Args& a, size_t t0, int L, size_t n, float* gam, float* bet) {
  if (threadIdx.x < kC) {
    const int r = static_cast<int>(threadIdx.x);
    bet[r] = r < L ? a.beta[(t0 + r) * a.s.n_v_heads + n] : 0.0f;
    gam[r] = r < L ? a.g[(t0 + r) * a.s.n_v_heads + n] : 0.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int r = 0; r < kC; ++r) gam[r] = (sum += gam[r]);
  }
  __syncthreads();
}

// Ks = k, QVs = q / sqrt(dk); the scratch gets Kd = e^(gam_L - gam) k and Qp's first term
// e^gam (q / sqrt(dk)), both from the same registers.
template <int kLd>
__device__ void load_qk(const Args& a, size_t t0, int L, size_t n, size_t rec, const float* gam, float* Ks,
                        float* QVs) {
  const int lane = static_cast<int>(threadIdx.x) % kVec, row0 = static_cast<int>(threadIdx.x) / kVec;
  const size_t off = t0 * a.s.qk_token_stride + (n % a.s.n_k_heads) * kD;
  float4 kr[kPasses], qr[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r = row0 + kRowsPerPass * p;
    kr[p] = load_row4(a.k + off, a.s.qk_token_stride, r, L, lane);
    qr[p] = load_row4(a.q + off, a.s.qk_token_stride, r, L, lane);
  }
  float* Kd = a.sc.Kd + rec * kC * kD;
  float* Qp = a.sc.Qp + rec * kC * kD;
  const float gl = gam[kC - 1];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r = row0 + kRowsPerPass * p;
    const float4 q = scale4(qr[p], a.q_scale);
    put4(Ks + r * kLd, lane, kr[p]);
    put4(QVs + r * kLd, lane, q);
    reinterpret_cast<float4*>(Kd + r * kD)[lane] = scale4(kr[p], expf(gl - gam[r]));
    reinterpret_cast<float4*>(Qp + r * kD)[lane] = scale4(q, expf(gam[r]));
  }
}

// After the pairwise products: QVs = diag(beta) v and Ks scaled in place to diag(beta e^gam) k.
// The v loads are issued before the barrier that frees the q tile, so their latency overlaps it.
template <int kLd>
__device__ void load_v_scale_k(const Args& a, size_t t0, int L, size_t n, const float* gam, const float* bet, float* Ks,
                               float* QVs) {
  const int lane = static_cast<int>(threadIdx.x) % kVec, row0 = static_cast<int>(threadIdx.x) / kVec;
  const float* vb = a.v + t0 * a.s.v_token_stride + n * kD;
  float4 vr[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) vr[p] = load_row4(vb, a.s.v_token_stride, row0 + kRowsPerPass * p, L, lane);
  __syncthreads();  // every pairwise read of raw k and q is done
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r = row0 + kRowsPerPass * p;
    put4(QVs + r * kLd, lane, scale4(vr[p], bet[r]));
    const float f = bet[r] * expf(gam[r]);
#pragma unroll
    for (int i = 0; i < 4; ++i) Ks[r * kLd + 4 * lane + i] *= f;
  }
}

// Launches a prep kernel: one block per (chunk, value head), `smem_bytes` of dynamic shared
// memory. The attribute is set per call, not once per process: it belongs to the current device
// (a few us).
inline cudaError_t launch_prep_kernel(void (*kernel)(Args), size_t smem_bytes, const Args& a, size_t n_chunks,
                                      cudaStream_t stream) {
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes));
  if (e != cudaSuccess) return e;
  kernel<<<dim3(static_cast<unsigned>(n_chunks), static_cast<unsigned>(a.s.n_v_heads)), kThreads, smem_bytes, stream>>>(
      a);
  return cudaGetLastError();
}

}  // namespace ds::cuda::gdn_chunked_detail::prep_load
