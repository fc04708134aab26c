// Chunked (UT/WY) Gated DeltaNet prefill on the GPU: the same contract as ds::cuda::gdn_prefill
// (kernels/cuda/gdn.h, CPU twin cpu::gdn_chunked / cpu::gdn_recurrent), computed in chunks of
// kGdnChunk tokens so that all the work inside a chunk runs in parallel and only a short
// state pass per chunk is sequential (qwen35-model-spec.md §5.6):
//
//   per chunk, per value head (independent of the incoming state S0; parallel over chunks):
//     gam = cumsum(g), A = strictly-lower beta_t e^(gam_t - gam_s) k_t.k_s, T = (I + A)^-1,
//     W = T diag(beta e^gam) K, Ut = T diag(beta) V, P = lower(e^(gam_t - gam_s) q_t.k_s),
//     Qp = diag(e^gam) Q - P W, Op = P Ut, Kd = diag(e^(gam_L - gam)) K
//   then in chunk order (one block per value head and 32 value columns, state in shared memory):
//     U = Ut - W S0,  O = Op + Qp S0,  S1 = e^gam_L S0 + Kd^T U.
// (O = diag(e^gam) Q S0 + P U with U substituted, so the sequential pass does no P product.)
//
// All f32 (CUDA cores); the result equals the token recurrence up to f32 rounding (~1e-6 relative
// measured on random unit keys; the forms differ in summation order and where decays are applied).
// Needs dk, dv <= 128 and multiples of 4 (every real model: 128 x 128); other shapes return
// cudaErrorInvalidValue (gdn_chunked_applies says which). Scratch comes from the per-stream
// workspace of matmul_fast.h (at most kGdnChunkedScratchBytes, shared with the GEMM's): tokens run in
// segments of as many chunks as it holds.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/gdn.h"  // GdnShape

namespace ds::cuda {

inline constexpr size_t kGdnChunk = 64;
inline constexpr size_t kGdnChunkedMaxDim = 128;
inline constexpr size_t kGdnChunkedScratchBytes = size_t{128} << 20;

bool gdn_chunked_applies(const GdnShape& s);

// Which kernel runs the prep (the per-chunk part). kV2 and kV3 are f32 with the same arithmetic, so the
// same results up to f32 summation order (the state pass is shared).
//   kV2: 3 operand tiles in shared memory (133 KB: one block, 8 warps per SM), element-wise loads.
//   kV3 (default): dk = dv = 128 and 16-byte aligned q/k/v rows only (other calls run kV2): 100 KB
//     of shared memory (two blocks per SM), 16-byte loads issued together, Kd and e^gam Q written
//     straight from the loaded registers; the prep was latency-bound (several times its arithmetic
//     at 9B shapes: docs/history/performance-2026-11.md), so residency and fewer round trips are the levers.
//   kTensorCores: kV3's flow with its products on tensor cores (mma.sync m16n8k8 tf32, f32
//     accumulation, sm_80+; gdn_chunked_prep_tc.cu): the triangular inverse stays f32; operands of
//     the products are rounded to tf32 (2^-11 relative). Takes the calls kV3 takes (others: kV2).
enum class GdnPrep { kV2, kV3, kTensorCores };

// Which arithmetic the state pass (the sequential part) runs.
//   kF32: f32 CUDA cores (4x4 register tiles), the reference above.
//   kTensorCores: mma.sync m16n8k8 tf32 with f32 accumulation (sm_80+; gdn_chunked_tc.cu). The
//     state stays f32 in shared memory; only the mma operands ([W; Qp], S0, Kd, U) are rounded
//     to tf32 (10-bit mantissa, round to nearest: 2^-11 relative per operand), so each product
//     term carries <= 2^-10 relative error, accumulated in f32. dk = dv = 128 only (every real
//     model); other shapes, or `out` not 8-byte aligned, run kF32.
enum class GdnMath { kF32, kTensorCores };

struct GdnChunkedConfig {
  GdnPrep prep = GdnPrep::kV3;
  GdnMath math = GdnMath::kF32;
  // kTensorCores only: value columns per state-pass block, 32 or 64; 0 picks 32 when
  // n_v_heads x dv / 32 blocks fit one wave on the device's SMs, else 64 (fewer, wider blocks
  // than a second partial wave, e.g. 27B: 48 heads x 4 = 192 blocks on 132 SMs).
  int tc_slab = 0;
};

// With GdnPrep::kV3 (not an overload of gdn_chunked, so its address stays unambiguous).
cudaError_t gdn_chunked(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                        const float* beta, float* state, float* out, cudaStream_t stream);
cudaError_t gdn_chunked_with_prep(GdnPrep prep, const GdnShape& s, const float* q, const float* k, const float* v,
                                  const float* g, const float* beta, float* state, float* out, cudaStream_t stream);
cudaError_t gdn_chunked_configured(const GdnChunkedConfig& config, const GdnShape& s, const float* q, const float* k,
                                   const float* v, const float* g, const float* beta, float* state, float* out,
                                   cudaStream_t stream);

}  // namespace ds::cuda
