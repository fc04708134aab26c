// The chunked GDN prefill's state pass on tensor cores (GdnMath::kTensorCores, gdn_chunked.h):
// the same two products per chunk as state_kernel in gdn_chunked.cu,
//   phase A: [W; Qp] (128 x dk) S0 (dk x slab)  -> U = Ut - W S0 (rows < 64), O = Op + Qp S0,
//   phase B: S1 = e^gam_L S0 + Kd^T (dk x 64) U (64 x slab),
// as mma.sync m16n8k8 tf32 tiles with f32 accumulation, one block of 8 warps per (value head,
// slab of value columns), chunks in order. Each warp owns 16 rows of [W; Qp] in phase A (warps
// 0-3 make U, 4-7 make O) and 16 state rows in phase B, across the whole slab.
//
// Why tf32 rather than bf16: the state is carried across every chunk of the prompt and into
// decode, and the f32 SIMT pass was bound by shared-memory traffic (one float4 of operands per 4
// FMAs), not by arithmetic: m16n8k8 tf32 already moves that work to the tensor cores, and its
// operands are the f32 scratch and state as they are (no conversion pass, no bf16 copies), with
// 4x less rounding per operand than bf16 (2^-11 vs 2^-9). 3xTF32 (near-f32) would triple the
// MMAs for an error the bf16 prefill's projections already exceed.
//
// Numerics: the state in shared memory stays f32 (phase B accumulates onto e^gam_L S0 in f32);
// each operand is rounded to tf32 (cvt.rna) only as it enters a fragment.
//
// Shared-memory rows are padded so every fragment load of a warp hits 32 distinct banks:
//   [W; Qp] as A (row g, column qd): row stride 132 = 4 mod 32 -> bank 4g + qd;
//   Kd^T as A (element [t][i] at row t = qd, column i = g): stride 136 = 8 mod 32 -> 8qd + g;
//   S0 and U as B (row k = qd, column g): stride slab + 8 = 8 mod 32 -> 8qd + g.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/device_info.h"
#include "kernels/cuda/gdn_chunked_common.cuh"
#include "kernels/cuda/ptx_mma.cuh"  // tf32, mma_tf32

namespace ds::cuda::gdn_chunked_detail {
namespace {

using ptx::mma_tf32;
using ptx::tf32;

constexpr int kD = 128;   // dk = dv
constexpr int kLk = 136;  // Kd rows ([W; Qp] rows: kLx = 132 of gdn_chunked_common.cuh)
static_assert(kLx % 32 == 4 && kLk % 32 == 8, "conflict-free fragment loads (see the top)");
constexpr int kWarps = kThreads / kWarp;
static_assert(kWarps * 16 == 2 * kC && kWarps * 16 == kD, "8 warps of 16 rows cover [W; Qp] and the state");

template <int kSlabCols>
struct TcLayout {
  static constexpr int kNT = kSlabCols / 8;    // n8 tiles per warp
  static constexpr int kLsTc = kSlabCols + 8;  // S0 and U rows
  static constexpr size_t kFloats = size_t{2 * kC} * kLx + size_t{kC} * kLk + size_t{kD} * kLsTc + size_t{kC} * kLsTc;
};

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

// kC rows of kD floats (contiguous) into shared rows of `ld` floats.
__device__ void copy_rows_async(const float* src, int ld, float* dst) {
  constexpr int kVec = kD / 4;
  for (int e = static_cast<int>(threadIdx.x); e < kC * kVec; e += kThreads) {
    const int r = e / kVec, i = (e % kVec) * 4;
    cp_async16(dst + r * ld + i, src + r * kD + i);
  }
}

// Phase A for the warp's 16 rows of [W; Qp] (rows of kLx floats) times S0 (rows of kLsTc floats).
template <int kNT, int kLsTc>
__device__ __forceinline__ void rows_times_state(const float* xa, const float* Ss, int g, int qd, float acc[][4]) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
#pragma unroll 4
  for (int k0 = 0; k0 < kD; k0 += 8) {
    const uint32_t af[4] = {tf32(xa[g * kLx + k0 + qd]), tf32(xa[(g + 8) * kLx + k0 + qd]),
                            tf32(xa[g * kLx + k0 + qd + 4]), tf32(xa[(g + 8) * kLx + k0 + qd + 4])};
    const float* b = Ss + (k0 + qd) * kLsTc + g;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) mma_tf32(acc[nt], af, tf32(b[nt * 8]), tf32(b[4 * kLsTc + nt * 8]));
  }
}

// Phase B for the warp's 16 state rows i0.. : acc = decay S0 + Kd^T U over the chunk's first
// `t_end` tokens (a multiple of 8; later rows of Kd and U are zero), written back to Ss.
template <int kNT, int kLsTc>
__device__ __forceinline__ void update_state(const float* Kds, const float* Us, float* Ss, int i0, int t_end,
                                             float decay, int g, int qd) {
  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float* s = Ss + (i0 + g + 8 * h) * kLsTc + nt * 8 + 2 * qd;
      acc[nt][2 * h] = decay * s[0];
      acc[nt][2 * h + 1] = decay * s[1];
    }
  for (int t0 = 0; t0 < t_end; t0 += 8) {
    const float* ka = Kds + (t0 + qd) * kLk + i0 + g;  // Kd^T[i][t] = Kd[t][i]
    const uint32_t af[4] = {tf32(ka[0]), tf32(ka[8]), tf32(ka[4 * kLk]), tf32(ka[4 * kLk + 8])};
    const float* b = Us + (t0 + qd) * kLsTc + g;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) mma_tf32(acc[nt], af, tf32(b[nt * 8]), tf32(b[4 * kLsTc + nt * 8]));
  }
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* s = Ss + (i0 + g + 8 * h) * kLsTc + nt * 8 + 2 * qd;
      s[0] = acc[nt][2 * h];
      s[1] = acc[nt][2 * h + 1];
    }
}

template <int kSlabCols>
__global__ void __launch_bounds__(kThreads) state_tc_kernel(Args a, size_t n_chunks) {
  using Lay = TcLayout<kSlabCols>;
  constexpr int kNT = Lay::kNT, kLsTc = Lay::kLsTc;
  extern __shared__ __align__(16) float smem[];
  float* Xs = smem;                // [2 kC][kLx]: W rows, then Qp rows
  float* Kds = Xs + 2 * kC * kLx;  // [kC][kLk]
  float* Ss = Kds + kC * kLk;      // [kD][kLsTc]: the state slab (f32), resident for the whole call
  float* Us = Ss + kD * kLsTc;     // [kC][kLsTc]
  const size_t n = blockIdx.x, nv = a.s.n_v_heads;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, qd = lane % 4;
  const size_t c0 = size_t{blockIdx.y} * kSlabCols;  // the slab's first value column
  float* Sg = a.state + n * kD * kD + c0;

  for (int e = static_cast<int>(threadIdx.x); e < kD * kSlabCols; e += kThreads) {
    Ss[(e / kSlabCols) * kLsTc + e % kSlabCols] = Sg[(e / kSlabCols) * kD + e % kSlabCols];
  }
  copy_rows_async(a.sc.W + record(a, 0, n) * kC * kD, kLx, Xs);
  copy_rows_async(a.sc.Qp + record(a, 0, n) * kC * kD, kLx, Xs + kC * kLx);
  cp_async_commit();

  for (size_t chunk = 0; chunk < n_chunks; ++chunk) {
    const size_t t0 = a.t0 + chunk * kC, rec = record(a, chunk, n);
    const int L = static_cast<int>(std::min<size_t>(kC, a.s.n_tokens - t0));
    cp_async_wait_all();
    __syncthreads();  // [W; Qp] landed; the previous phase B is done with Kds, Us and Ss
    copy_rows_async(a.sc.Kd + rec * kC * kD, kLk, Kds);
    cp_async_commit();

    // This chunk's Ut (warps 0-3: W rows make U) or Op (warps 4-7: Qp rows make O) at the
    // warp's accumulator positions, and e^gam_L: loads issued before phase A, off its critical path.
    const bool makes_u = warp < kWarps / 2;
    const float* src = (makes_u ? a.sc.Ut : a.sc.Op) + rec * kC * kD + c0;
    const float decay = expf(a.sc.gl[rec]);
    float2 base[2][kNT];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int t = (warp % (kWarps / 2)) * 16 + g + 8 * h;
        base[h][nt] = *reinterpret_cast<const float2*>(src + t * kD + nt * 8 + 2 * qd);
      }
    float acc[kNT][4];
    rows_times_state<kNT, kLsTc>(Xs + warp * 16 * kLx, Ss, g, qd, acc);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = (warp % (kWarps / 2)) * 16 + g + 8 * h;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int c = nt * 8 + 2 * qd;
        const float2 b = base[h][nt];
        if (makes_u) {
          Us[t * kLsTc + c] = b.x - acc[nt][2 * h];
          Us[t * kLsTc + c + 1] = b.y - acc[nt][2 * h + 1];
        } else if (t < L) {
          *reinterpret_cast<float2*>(a.out + ((t0 + t) * nv + n) * kD + c0 + c) =
              make_float2(b.x + acc[nt][2 * h], b.y + acc[nt][2 * h + 1]);
        }
      }
    }
    cp_async_wait_all();
    __syncthreads();  // Kd landed; U complete; [W; Qp] and S0 no longer read by phase A
    if (chunk + 1 < n_chunks) {
      copy_rows_async(a.sc.W + record(a, chunk + 1, n) * kC * kD, kLx, Xs);
      copy_rows_async(a.sc.Qp + record(a, chunk + 1, n) * kC * kD, kLx, Xs + kC * kLx);
      cp_async_commit();
    }
    update_state<kNT, kLsTc>(Kds, Us, Ss, warp * 16, (L + 7) / 8 * 8, decay, g, qd);
  }
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < kD * kSlabCols; e += kThreads) {
    Sg[(e / kSlabCols) * kD + e % kSlabCols] = Ss[(e / kSlabCols) * kLsTc + e % kSlabCols];
  }
}

template <int kSlabCols>
cudaError_t launch(const Args& a, size_t n_chunks, cudaStream_t stream) {
  constexpr size_t kBytes = TcLayout<kSlabCols>::kFloats * sizeof(float);
  static_assert(kBytes <= 227 * 1024, "one block per SM");
  // Per call, not once per process: the attribute belongs to the current device (a few us).
  const cudaError_t e = cudaFuncSetAttribute(state_tc_kernel<kSlabCols>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(kBytes));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(a.s.n_v_heads), static_cast<unsigned>(kD / kSlabCols));
  state_tc_kernel<kSlabCols><<<grid, kThreads, kBytes, stream>>>(a, n_chunks);
  return cudaGetLastError();
}

}  // namespace

bool state_tc_applies(const Args& a) {
  return a.s.dk == kD && a.s.dv == kD && detail::aligned_to(a.out, 8);
}

cudaError_t launch_state_tc(const Args& a, size_t n_chunks, int slab, cudaStream_t stream) {
  if (slab == 0) {
    // One wave of 32-column blocks when it fits; otherwise 64-column blocks (half as many, each
    // loading its chunk's [W; Qp] and Kd once for twice the columns) rather than a partial second wave.
    const size_t blocks32 = a.s.n_v_heads * (kD / 32);
    slab = blocks32 <= static_cast<size_t>(current_device_sm_count()) ? 32 : 64;
  }
  switch (slab) {
    case 32:
      return launch<32>(a, n_chunks, stream);
    case 64:
      return launch<64>(a, n_chunks, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ds::cuda::gdn_chunked_detail
