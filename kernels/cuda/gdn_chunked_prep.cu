// The v3 prep of the chunked GDN prefill (GdnPrep::kV3, gdn_chunked.h): the same per-(chunk,
// value head) products as the v2 prep in gdn_chunked.cu, arranged for residency and fewer memory
// round trips. The v2 prep was latency-bound: one 133 KB block (8 warps) per SM, every q/k/v
// element loaded by a dependent round trip inside a loop with 64-bit index division, and k read
// from global memory a second time for Kd. Here:
//  - two operand tiles in shared memory instead of three (100 KB, two blocks per SM): q is only
//    needed by the pairwise products, so v is loaded into its tile afterwards, and the e^gam Q
//    term of Qp is written to the scratch straight from the loaded registers and read back at
//    the end;
//  - the gates first, then every k and q load of the thread in flight at once (16-byte loads, a
//    warp per row), Kd written from those registers.
// Arithmetic per output element is unchanged (same operands, same order of each sum), so the
// results equal v2's up to the compiler's multiply-add contraction (an ulp here and there).
#include <algorithm>

#include "kernels/cuda/gdn_chunked_common.cuh"
#include "kernels/cuda/gdn_chunked_prep_load.cuh"

namespace ds::cuda::gdn_chunked_detail {
namespace {

using namespace prep_load;

constexpr size_t kSmemFloats = PrepTiles<kLdk, kLdc>::kFloats;
static_assert(kSmemFloats * sizeof(float) * 2 + 2 * 1024 <= 228 * 1024, "two blocks per SM");

__global__ void __launch_bounds__(kThreads, 2) prep_v3_kernel(Args a) {
  extern __shared__ float smem[];
  const auto [Ks, QVs, As, Ts, gam, bet] = carve_prep_tiles<kLdk, kLdc>(smem);
  const auto [t0, L, n, rec] = this_prep_chunk(a);
  const int ty = static_cast<int>(threadIdx.x) / 16, tx = static_cast<int>(threadIdx.x) % 16;

  load_gates(a, t0, L, n, gam, bet);
  load_qk<kLdk>(a, t0, L, n, rec, gam, Ks, QVs);
  __syncthreads();  // k and q tiles complete
  float P[4][4];
  pairwise(kD, Ks, QVs, gam, bet, As, P);
  load_v_scale_k<kLdk>(a, t0, L, n, gam, bet, Ks, QVs);  // its barrier also completes A
  invert_unit_lower(As, Ts);
  __syncthreads();  // T complete, A no longer read; scaled k and v in place
  store_p(P, As);
  float acc[4][kMaxD / 16];
  lower_times(Ts, Ks, acc);  // W = T diag(beta e^gam) K
  __syncthreads();           // every read of the scaled k done
  store_tile(acc, kD, Ks, kLdk);
  store_tile(acc, kD, a.sc.W + rec * kC * kD, kD);
  lower_times(Ts, QVs, acc);  // Ut = T diag(beta) V
  __syncthreads();            // every read of the scaled v done; W and P in shared memory
  store_tile(acc, kD, QVs, kLdk);
  store_tile(acc, kD, a.sc.Ut + rec * kC * kD, kD);
  __syncthreads();  // Ut in shared memory

  // Qp = e^gam Q - P W: the first term was written by this block in load_qk (made visible to
  // every thread of the block by the barriers since).
  float* Qp = a.sc.Qp + rec * kC * kD;
  lower_times(As, Ks, acc);
#pragma unroll
  for (int x = 0; x < 4; ++x)
#pragma unroll
    for (int b = 0; b < kMaxD / 16; ++b) acc[x][b] = Qp[(ty * 4 + x) * kD + tx + 16 * b] - acc[x][b];
  store_tile(acc, kD, Qp, kD);
  lower_times(As, QVs, acc);  // Op = P Ut
  store_tile(acc, kD, a.sc.Op + rec * kC * kD, kD);
  if (threadIdx.x == 0) a.sc.gl[rec] = gam[kC - 1];
}

}  // namespace

bool prep_v3_applies(const Args& a) {
  const GdnShape& s = a.s;
  return s.dk == kD && s.dv == kD && s.qk_token_stride % 4 == 0 && s.v_token_stride % 4 == 0 &&
         detail::aligned_to(a.q, 16) && detail::aligned_to(a.k, 16) && detail::aligned_to(a.v, 16);
}

cudaError_t launch_prep_v3(const Args& a, size_t n_chunks, cudaStream_t stream) {
  return launch_prep_kernel(prep_v3_kernel, kSmemFloats * sizeof(float), a, n_chunks, stream);
}

}  // namespace ds::cuda::gdn_chunked_detail
