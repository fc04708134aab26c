// CUDA twins of kernels/cpu/moe.h: the router and the routed experts of a mixture-of-experts FFN,
// on device pointers, with no host round trip (no download, no host-side plan).
//
// moe_experts runs in one of two regimes, chosen by the step's (token, slot) pair count P = T k:
//  * gather (P <= kMoeGatherMaxPairs: decode, verify rows, short steps): one launch computes the
//    gate and up rows of every pair reading only the selected experts' rows, SwiGLU fused; one
//    launch computes each token's down rows for all its slots and combines them in slot order
//    (plus the gated shared expert) straight into y. Three launches with the router.
//  * grouped (larger P: prefill): the pairs are sorted by expert on the device into tiles of
//    kMoeTilePairs pairs of one expert (one single-block launch), then one launch over all tiles
//    per projection (gate+up, down), each weight row read once per tile, and a combine launch.
// Both regimes compute every pair's dot products with the same lane split and the same reduction
// (pair-private accumulators), and combine the slots with the same fma sequence, so a token's
// bits do not depend on the regime, on the other tokens of the step, or on their order: the
// determinism the project asks of batching and worker splits. No float atomics anywhere.
//
// Numerics: f32 activations against the exact dequantized weights (d * q), f32 accumulation: the
// f32 path's bound against the CPU reference (tests/backend_ops/test_backend_ops_moe.cpp).
// Weights: Q8_0 in GGUF order or in split rows (common/q8_split.h). Other types: NotSupported.
//
// The bf16 prefill mode (precision kBf16TensorCores, CudaBackendOptions::bf16_prefill): the grouped
// regime sorts into tiles of detail::kMoeTcTilePairs (64) pairs, in chunks of kMoeTcChunkPairs, and
// runs both products on bf16 tensor cores (kernels/cuda/moe_gemm_tc.h: Q8_0 rows widened to bf16 in
// registers, x and h in bf16, f32 accumulation, SwiGLU in the gate+up epilogue), then the same
// combine; 4e-3 sum|w x| per product, as the dense bf16 prefill GEMMs. A token's bits still do not
// depend on the other tokens of its step (each mma column is one pair's), but differ from the f32
// regimes', so such a step never falls back to the gather regime for a short last chunk. Shapes
// moe_gemm_tc.h does not take (D or F not a multiple of 128) and the f32 mode keep the f32 tiles,
// the exact path. Measured on an H200 at the 35B-A3B shape (DISABLED_CudaTiming35bA3b): T = 2048
// tokens 0.86 ms (f32 tiles: 12.9 ms), T = 8192 3.1 ms (134 TFLOP/s).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/moe.h"
#include "kernels/cuda/matmul.h"  // MatmulPrecision

namespace ds::cuda {

// The router's limits: one warp per token holds every logit of its token in registers.
inline constexpr size_t kMoeMaxExperts = 512;
inline constexpr size_t kMoeMaxK = 16;
// Steps with at most this many (token, slot) pairs take the gather regime.
inline constexpr size_t kMoeGatherMaxPairs = 64;
// Pairs per tile in the grouped regime (each of a tile's weight rows serves this many pairs).
inline constexpr size_t kMoeTilePairs = 8;
// Steps of more pairs run as token chunks of at most this many pairs (same bits: tokens are
// independent), which bounds the scratch: per pair F + D floats (16K-token prefill at k = 8
// would otherwise take 1.3 GB at the 35B-A3B shape; chunked, 84 MB).
inline constexpr size_t kMoeChunkPairs = 8192;
// The tensor-core products' chunks (bf16 mode): 4x more pairs, so an expert's tiles of 64 are full
// more often (each tile reads the expert's rows once); scratch ~336 MB at the 35B-A3B shape.
inline constexpr size_t kMoeTcChunkPairs = 32768;

// kernels/cpu/moe.h moe_route on the device: logits [T][E] -> experts [T][k], weights [T][k].
// Same ranking (logits, ties to the lower index) and the same renormalisation sequence; the exps
// and the softmax sum (a warp tree instead of a sequential sum) differ by f32 rounding only.
// cudaErrorInvalidValue when E > kMoeMaxExperts, k > kMoeMaxK or k > E.
cudaError_t moe_route(const float* logits, size_t n_tokens, size_t n_experts, size_t k, int32_t* experts,
                      float* weights, cudaStream_t stream);

// Device scratch bytes moe_experts needs for `m` (its shape only).
size_t moe_experts_scratch_bytes(const cpu::MoeExperts& m, MatmulPrecision precision = MatmulPrecision::kF32);

// kernels/cpu/moe.h moe_experts on the device; `scratch` holds moe_experts_scratch_bytes(m) bytes
// (256-byte aligned, not in use by queued work). m.x must be 16-byte aligned. An expert id
// outside [0, E) contributes nothing (the CPU reference throws instead). cudaErrorInvalidValue
// for a shape cpu::moe_experts_problem rejects, an unaligned x or E > kMoeMaxExperts;
// cudaErrorNotSupported for weight types other than Q8_0 (either layout).
// precision kBf16TensorCores (the bf16 prefill mode) runs the grouped regime's products on bf16
// tensor cores where moe_gemm_tc.h takes the shape; kF32 keeps every regime f32.
cudaError_t moe_experts(const cpu::MoeExperts& m, void* scratch, cudaStream_t stream,
                        MatmulPrecision precision = MatmulPrecision::kF32);

}  // namespace ds::cuda
