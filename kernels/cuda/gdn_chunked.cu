#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gdn_chunked.h"
#include "kernels/cuda/gdn_chunked_common.cuh"
#include "kernels/cuda/matmul_fast.h"  // stream_workspace

namespace ds::cuda {
namespace {

using namespace gdn_chunked_detail;

// ---- prep: one block per (chunk, value head), everything that does not need the state ---------

// Ks = k, Qs = q / sqrt(dk), Vs = v (zero rows past L); gam = cumsum(g) (padded rows add 0, so
// gam[kC-1] is gam_L), bet = beta.
__device__ void load_chunk(const Args& a, size_t t0, int L, size_t n, float* Ks, float* Qs, float* Vs, float* gam,
                           float* bet) {
  const GdnShape& s = a.s;
  const size_t kh = n % s.n_k_heads, dk = s.dk, dv = s.dv;
  for (size_t e = threadIdx.x; e < kC * dk; e += kThreads) {
    const int r = static_cast<int>(e / dk);
    const size_t i = e % dk;
    const size_t at = (t0 + r) * s.qk_token_stride + kh * dk + i;
    Ks[r * kLdk + i] = r < L ? a.k[at] : 0.0f;
    Qs[r * kLdk + i] = r < L ? a.q[at] * a.q_scale : 0.0f;
  }
  for (size_t e = threadIdx.x; e < kC * dv; e += kThreads) {
    const int r = static_cast<int>(e / dv);
    const size_t j = e % dv;
    Vs[r * kLdk + j] = r < L ? a.v[(t0 + r) * s.v_token_stride + n * dv + j] : 0.0f;
  }
  if (threadIdx.x < kC) {
    const int r = static_cast<int>(threadIdx.x);
    bet[r] = r < L ? a.beta[(t0 + r) * s.n_v_heads + n] : 0.0f;
    gam[r] = r < L ? a.g[(t0 + r) * s.n_v_heads + n] : 0.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // sequential, in the CPU's order
    float sum = 0.0f;
    for (int r = 0; r < kC; ++r) gam[r] = (sum += gam[r]);
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) prep_kernel(Args a) {
  extern __shared__ float smem[];
  float* Ks = smem;             // [kC][kLdk]: k, then diag(beta e^gam) k, then W
  float* Qs = Ks + kC * kLdk;   // [kC][kLdk]: q / sqrt(dk)
  float* Vs = Qs + kC * kLdk;   // [kC][kLdk]: v, then diag(beta) v, then Ut
  float* As = Vs + kC * kLdk;   // [kC][kLdc]: A, then P
  float* Ts = As + kC * kLdc;   // [kC][kLdc]
  float* gam = Ts + kC * kLdc;  // [kC]
  float* bet = gam + kC;        // [kC]
  const GdnShape& s = a.s;
  const size_t chunk = blockIdx.x, n = blockIdx.y, dk = s.dk, dv = s.dv;
  const size_t t0 = a.t0 + chunk * kC;
  const int L = static_cast<int>(std::min<size_t>(kC, s.n_tokens - t0));
  const size_t rec = record(a, chunk, n);
  const int ty = static_cast<int>(threadIdx.x) / 16, tx = static_cast<int>(threadIdx.x) % 16;

  load_chunk(a, t0, L, n, Ks, Qs, Vs, gam, bet);
  float P[4][4];
  pairwise(dk, Ks, Qs, gam, bet, As, P);
  __syncthreads();  // A complete, k no longer read raw
  for (size_t e = threadIdx.x; e < kC * dk; e += kThreads) {
    const int r = static_cast<int>(e / dk);
    Ks[r * kLdk + e % dk] *= bet[r] * expf(gam[r]);
  }
  for (size_t e = threadIdx.x; e < kC * dv; e += kThreads) {
    const int r = static_cast<int>(e / dv);
    Vs[r * kLdk + e % dv] *= bet[r];
  }
  invert_unit_lower(As, Ts);
  __syncthreads();  // T complete, A no longer read
  store_p(P, As);
  float acc_w[4][kMaxD / 16], acc_u[4][kMaxD / 16];
  lower_times(Ts, Ks, acc_w);
  lower_times(Ts, Vs, acc_u);
  __syncthreads();  // every read of the scaled K and V done; P complete
  store_tile(acc_w, dk, Ks, kLdk);
  store_tile(acc_w, dk, a.sc.W + rec * kC * dk, dk);
  store_tile(acc_u, dv, Vs, kLdk);
  store_tile(acc_u, dv, a.sc.Ut + rec * kC * dv, dv);
  __syncthreads();  // W and Ut in shared memory

  // Qp = diag(e^gam) Q - P W and Op = P Ut (acc_w / acc_u reused).
  lower_times(As, Ks, acc_w);
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const int r = ty * 4 + x;
    const float eg = expf(gam[r]);
#pragma unroll
    for (int b = 0; b < kMaxD / 16; ++b) acc_w[x][b] = eg * Qs[r * kLdk + tx + 16 * b] - acc_w[x][b];
  }
  store_tile(acc_w, dk, a.sc.Qp + rec * kC * dk, dk);
  lower_times(As, Vs, acc_u);
  store_tile(acc_u, dv, a.sc.Op + rec * kC * dv, dv);

  // Kd = diag(e^(gam_L - gam)) K, from the input again (Ks now holds W).
  const size_t kh = n % s.n_k_heads;
  float* Kd = a.sc.Kd + rec * kC * dk;
  for (size_t e = threadIdx.x; e < kC * dk; e += kThreads) {
    const int r = static_cast<int>(e / dk);
    Kd[e] = r < L ? a.k[(t0 + r) * s.qk_token_stride + kh * dk + e % dk] * expf(gam[kC - 1] - gam[r]) : 0.0f;
  }
  if (threadIdx.x == 0) a.sc.gl[rec] = gam[kC - 1];
}

// ---- state pass: one block per (value head, 32 value columns), chunks in order -----------------

__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::);
}

// rows [kC][dk] of src (row stride dk) into dst rows of kLx floats, 16 bytes per copy.
__device__ void copy_rows_async(const float* src, size_t dk, float* dst) {
  const size_t d4 = dk / 4;
  for (size_t e = threadIdx.x; e < kC * d4; e += kThreads) {
    const size_t r = e / d4, i = (e % d4) * 4;
    cp_async16(dst + r * kLx + i, src + r * dk + i);
  }
}

// Thread (tr = tid / 8, tc = tid % 8): rows tr + 32 x (x < 4) and value columns 4 tc .. 4 tc + 3 of
// the slab, in both phases. Phase A: [W; Qp] (128 rows) times S0 gives U (rows < 64) and O (rows
// >= 64). Phase B: S1 = e^gam_L S0 + Kd^T U over the thread's state rows. Loads of the next
// chunk's [W; Qp] overlap phase B (cp.async), Kd's overlap phase A.
__global__ void __launch_bounds__(kThreads) state_kernel(Args a, size_t n_chunks) {
  extern __shared__ __align__(16) float smem[];
  float* Xs = smem;                // [2 kC][kLx]: W rows, then Qp rows
  float* Kds = Xs + 2 * kC * kLx;  // [kC][kLx]
  float* Ss = Kds + kC * kLx;      // [kMaxD][kLs]: the state slab, resident for the whole call
  float* Us = Ss + kMaxD * kLs;    // [kC][kLs]
  const GdnShape& s = a.s;
  const size_t n = blockIdx.x, dk = s.dk, dv = s.dv;
  const int tr = static_cast<int>(threadIdx.x) / 8, tc = static_cast<int>(threadIdx.x) % 8;
  const size_t j0 = size_t{blockIdx.y} * kSlab + 4 * tc;  // first of the thread's 4 columns
  const bool active = j0 < dv;                            // dv % 4 == 0: all 4 or none
  float* Sg = a.state + n * dk * dv;

  for (size_t e = threadIdx.x; e < dk * kSlab; e += kThreads) {
    const size_t i = e / kSlab, c = e % kSlab, j = size_t{blockIdx.y} * kSlab + c;
    Ss[i * kLs + c] = j < dv ? Sg[i * dv + j] : 0.0f;
  }
  copy_rows_async(a.sc.W + record(a, 0, n) * kC * dk, dk, Xs);
  copy_rows_async(a.sc.Qp + record(a, 0, n) * kC * dk, dk, Xs + kC * kLx);
  cp_async_commit();

  for (size_t chunk = 0; chunk < n_chunks; ++chunk) {
    const size_t t0 = a.t0 + chunk * kC, rec = record(a, chunk, n);
    const int L = static_cast<int>(std::min<size_t>(kC, s.n_tokens - t0));
    cp_async_wait_all();
    __syncthreads();  // [W; Qp] landed; the previous phase B is done with Kds, Us and Ss
    copy_rows_async(a.sc.Kd + rec * kC * dk, dk, Kds);
    cp_async_commit();

    float acc[4][4] = {};
    for (size_t i = 0; i < dk; i += 4) {
      float4 sv[4];
#pragma unroll
      for (int y = 0; y < 4; ++y) sv[y] = *reinterpret_cast<const float4*>(Ss + (i + y) * kLs + 4 * tc);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const float4 xv = *reinterpret_cast<const float4*>(Xs + (tr + 32 * x) * kLx + i);
        const float xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int y = 0; y < 4; ++y) {
          acc[x][0] += xs[y] * sv[y].x;
          acc[x][1] += xs[y] * sv[y].y;
          acc[x][2] += xs[y] * sv[y].z;
          acc[x][3] += xs[y] * sv[y].w;
        }
      }
    }
    const float* Ut = a.sc.Ut + rec * kC * dv;
    const float* Op = a.sc.Op + rec * kC * dv;
#pragma unroll
    for (int x = 0; x < 2; ++x) {  // rows tr, tr + 32: U = Ut - W S0
      const int t = tr + 32 * x;
      float4 u = active ? *reinterpret_cast<const float4*>(Ut + t * dv + j0) : make_float4(0, 0, 0, 0);
      u.x -= acc[x][0];
      u.y -= acc[x][1];
      u.z -= acc[x][2];
      u.w -= acc[x][3];
      *reinterpret_cast<float4*>(Us + t * kLs + 4 * tc) = u;
    }
#pragma unroll
    for (int x = 2; x < 4; ++x) {  // rows 64 + tr, 96 + tr: O = Op + Qp S0
      const int t = tr + 32 * (x - 2);
      if (!active || t >= L) continue;
      const float4 o = *reinterpret_cast<const float4*>(Op + t * dv + j0);
      float* dst = a.out + ((t0 + t) * s.n_v_heads + n) * dv + j0;
      dst[0] = o.x + acc[x][0];
      dst[1] = o.y + acc[x][1];
      dst[2] = o.z + acc[x][2];
      dst[3] = o.w + acc[x][3];
    }
    cp_async_wait_all();
    __syncthreads();  // Kd landed; U complete; [W; Qp] no longer read
    if (chunk + 1 < n_chunks) {
      copy_rows_async(a.sc.W + record(a, chunk + 1, n) * kC * dk, dk, Xs);
      copy_rows_async(a.sc.Qp + record(a, chunk + 1, n) * kC * dk, dk, Xs + kC * kLx);
      cp_async_commit();
    }

    const float decay = expf(a.sc.gl[rec]);
    float upd[4][4] = {};
    for (int t = 0; t < L; ++t) {
      const float4 u = *reinterpret_cast<const float4*>(Us + t * kLs + 4 * tc);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const float kd = Kds[t * kLx + tr + 32 * x];
        upd[x][0] += kd * u.x;
        upd[x][1] += kd * u.y;
        upd[x][2] += kd * u.z;
        upd[x][3] += kd * u.w;
      }
    }
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const size_t i = tr + 32 * x;
      if (i >= dk) continue;
      float4* sp = reinterpret_cast<float4*>(Ss + i * kLs + 4 * tc);
      float4 sv = *sp;
      sv.x = decay * sv.x + upd[x][0];
      sv.y = decay * sv.y + upd[x][1];
      sv.z = decay * sv.z + upd[x][2];
      sv.w = decay * sv.w + upd[x][3];
      *sp = sv;
    }
  }
  __syncthreads();
  for (size_t e = threadIdx.x; e < dk * kSlab; e += kThreads) {
    const size_t i = e / kSlab, c = e % kSlab, j = size_t{blockIdx.y} * kSlab + c;
    if (j < dv) Sg[i * dv + j] = Ss[i * kLs + c];
  }
}

size_t record_floats(const GdnShape& s) {
  return kC * (3 * s.dk + 2 * s.dv) + 1;
}

cudaError_t check(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                  const float* state, const float* out) {
  for (const float* p : {q, k, v, g, beta, state, out}) {
    if (p == nullptr) return cudaErrorInvalidValue;
    if (!detail::aligned_to(p, 4)) return cudaErrorMisalignedAddress;
  }
  if (!gdn_chunked_applies(s)) return cudaErrorInvalidValue;
  if (s.qk_token_stride < s.n_k_heads * s.dk || s.v_token_stride < s.n_v_heads * s.dv) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

bool gdn_chunked_applies(const GdnShape& s) {
  return s.n_k_heads > 0 && s.n_v_heads > 0 && s.dk > 0 && s.dv > 0 && s.dk <= kGdnChunkedMaxDim &&
         s.dv <= kGdnChunkedMaxDim && s.dk % 4 == 0 && s.dv % 4 == 0 && s.n_v_heads <= 65535;
}

cudaError_t gdn_chunked(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                        const float* beta, float* state, float* out, cudaStream_t stream) {
  return gdn_chunked_with_prep(GdnPrep::kV3, s, q, k, v, g, beta, state, out, stream);
}

cudaError_t gdn_chunked_with_prep(GdnPrep prep, const GdnShape& s, const float* q, const float* k, const float* v,
                                  const float* g, const float* beta, float* state, float* out, cudaStream_t stream) {
  return gdn_chunked_configured(GdnChunkedConfig{prep, GdnMath::kF32, 0}, s, q, k, v, g, beta, state, out, stream);
}

cudaError_t gdn_chunked_configured(const GdnChunkedConfig& config, const GdnShape& s, const float* q, const float* k,
                                   const float* v, const float* g, const float* beta, float* state, float* out,
                                   cudaStream_t stream) {
  const GdnPrep prep = config.prep;
  if (config.tc_slab != 0 && config.tc_slab != 32 && config.tc_slab != 64) return cudaErrorInvalidValue;
  if (s.n_tokens == 0) return cudaSuccess;
  if (const cudaError_t e = check(s, q, k, v, g, beta, state, out); e != cudaSuccess) return e;
  // Per call, not once per process: the attribute belongs to the current device (a few us).
  cudaError_t e = cudaFuncSetAttribute(prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kPrepSmemFloats * sizeof(float)));
  if (e == cudaSuccess) {
    e = cudaFuncSetAttribute(state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kStateSmemFloats * sizeof(float)));
  }
  if (e != cudaSuccess) return e;

  // Segments of as many chunks as the scratch budget holds: prep all of them in parallel, then
  // run the state pass over them in order.
  const size_t n_chunks = (s.n_tokens + kC - 1) / kC;
  const size_t per_chunk_bytes = s.n_v_heads * record_floats(s) * sizeof(float);
  const size_t seg_chunks = std::clamp<size_t>(kGdnChunkedScratchBytes / per_chunk_bytes, 1, n_chunks);
  auto* ws = static_cast<float*>(detail::stream_workspace(seg_chunks * per_chunk_bytes, stream, &e));
  if (ws == nullptr) return e;
  const size_t recs = seg_chunks * s.n_v_heads, wk = recs * kC * s.dk, wv = recs * kC * s.dv;
  const Scratch sc{ws, ws + wk, ws + 2 * wk, ws + 3 * wk, ws + 3 * wk + wv, ws + 3 * wk + 2 * wv};
  const float q_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.dk)));  // as kernels/cpu/gdn.cpp
  for (size_t c0 = 0; c0 < n_chunks; c0 += seg_chunks) {
    const size_t nc = std::min(seg_chunks, n_chunks - c0);
    const Args args{s, q, k, v, g, beta, state, out, q_scale, c0 * kC, sc};
    if (prep == GdnPrep::kTensorCores && prep_v3_applies(args)) {
      if ((e = launch_prep_tc(args, nc, stream)) != cudaSuccess) return e;
    } else if (prep == GdnPrep::kV3 && prep_v3_applies(args)) {
      if ((e = launch_prep_v3(args, nc, stream)) != cudaSuccess) return e;
    } else {
      prep_kernel<<<dim3(static_cast<unsigned>(nc), static_cast<unsigned>(s.n_v_heads)), kThreads,
                    kPrepSmemFloats * sizeof(float), stream>>>(args);
      if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (config.math == GdnMath::kTensorCores && state_tc_applies(args)) {
      if ((e = launch_state_tc(args, nc, config.tc_slab, stream)) != cudaSuccess) return e;
      continue;
    }
    state_kernel<<<dim3(static_cast<unsigned>(s.n_v_heads), static_cast<unsigned>((s.dv + kSlab - 1) / kSlab)),
                   kThreads, kStateSmemFloats * sizeof(float), stream>>>(args, nc);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace ds::cuda
