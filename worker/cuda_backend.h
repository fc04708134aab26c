// The CUDA backend: device memory from cudaMalloc, weights uploaded once from the GGUF mapping,
// every op a launcher from kernels/cuda on one stream. Only built with DELTASERVE_HAVE_CUDA.
#pragma once

#include <memory>

#include "worker/backend.h"

namespace ds {

// A backend on CUDA device `device`. Throws std::runtime_error when the device does not exist or a
// CUDA call fails (the message names the call, the source location and the CUDA error).
struct CudaBackendOptions {
  // Q8_0 prefill products (>= 16 tokens) and prefill attention on bf16 tensor cores with f32
  // accumulation (default).
  // false: f32 SIMT products, equal to the CPU path up to f32 rounding order; the parity tests on
  // the random-weight fixture ask for this, because that fixture amplifies rounding ~10^4x (the
  // bf16 path is bounded on a well-conditioned synthetic model instead: test_cuda_model_bf16.cpp).
  bool bf16_prefill = true;
  // Which GEMM runs those bf16 products (kernels/cuda/matmul.h, TcGemmKernel): cuBLASLt (default:
  // the fastest measured, docs/PERFORMANCE.md) or our mma.sync kernel. Same operands, same bound.
  enum class PrefillGemm { kCublasLt, kMmaSync };
  PrefillGemm prefill_gemm = PrefillGemm::kCublasLt;
  // Keep a bf16 copy of each Q8_0 matrix once it is used in a bf16 prefill product (2 bytes per
  // weight: ~18 GB more for 9B), instead of dequantizing it on every call. Off by default; when
  // the copy does not fit, that matrix keeps the per-call dequantization.
  bool bf16_weight_copy = false;
  // Decode steps digest the logits on the device (kernels/cuda/logit_digest.h) and download the
  // digest only, when the step asks for digests and every row's rule allows it (greedy, or
  // top_k <= 64); false: the logits are always downloaded and digested on the host.
  bool device_logit_digest = true;
  // Fused decode ops, one kernel each: Backend::add_rms_norm (residual add + the next RMSNorm,
  // norm.cu) and Backend::conv_silu_l2_token (GDN conv + SiLU + q/k L2 norm of one token,
  // conv_l2_decode.cu); and the GDN decode of all sequences of a step in one launch per layer
  // (Backend::conv_silu_l2_slots, gdn_decode_slots; its raw-gate form computes the gates in that
  // launch too), likewise the attention of all one-token sequences
  // (Backend::attention_decode_batch), and an attention layer's q/k norm + rope + K/V cache write
  // (Backend::attention_prep, attention_prep.cu); false: the separate ops, per sequence.
  bool fused_decode_ops = true;
  // Backend::weight_stack: matrices that share an input (GDN alpha+beta, qkv+gate, FFN gate+up)
  // uploaded as one stacked matrix so decode runs one GEMV for them; false: separate uploads.
  bool stacked_weights = true;
  // Chunked GDN prefill prep (kernels/cuda/gdn_chunked.h, GdnPrep): the v3 kernel (default; two
  // blocks per SM, batched 16-byte loads) or the v2 one. Same f32 arithmetic; v3 takes dk = dv =
  // 128 with aligned rows and falls back to v2 elsewhere.
  bool gdn_prep_v3 = true;
  // Chunked GDN prefill prep and state pass on tensor cores (cuda::GdnPrep::kTensorCores and
  // GdnMath::kTensorCores: tf32 mma.sync, f32 state; gdn_chunked.h) when bf16_prefill is on; the
  // f32 prefill mode always keeps the f32 kernels (the fixture-model tests rely on them). false:
  // f32 in both modes (gdn_prep_v3 then picks the prep).
  bool gdn_tensor_cores = true;
  // Q8_0 -> bf16 dequantization of the prefill weights (per call, and the persistent copy) with
  // the coalesced v2 kernel (kernels/cuda/dequant_q8.h; default) or v1. Bit-identical results.
  bool dequant_v2 = true;
  // Prefill fusions, each bit-identical to the ops it replaces (false runs those): the FFN's SwiGLU
  // rounded straight into the down projection's bf16 operand (kernels/cuda/swiglu_matmul.h), and
  // the GDN q/k head L2 norms in one launch (kernels/cuda/l2_norm_heads.h).
  bool prefill_fusions = true;
  // Q8_0 products of small_batch_mma_min..max tokens (multi-token decode, speculative verify) on
  // the small-batch tensor-core kernel (kernels/cuda/gemv_q8_mma.h: f32-level accuracy,
  // batch-invariant bits; it takes 1..64 tokens); false: the f32 GEMV (<= 8 tokens) and the
  // prefill paths (more). The default range 8..16 is where it measured faster on the H200
  // (docs/PERFORMANCE.md, "Small-batch tensor-core GEMV").
  bool small_batch_mma = true;
  size_t small_batch_mma_min = 8, small_batch_mma_max = 16;
  // Split-rows products of 5..split_small_max tokens in the bf16 mode on the small-batch bf16 GEMM
  // over split rows (kernels/cuda/matmul_fast.h gemm_q8_split_small; batched decode, verify rows):
  // weights read once per call, no dequantization pass. 0: off (the paths below).
  size_t split_small_max = 64;
  // Those products on the int8 small-batch GEMM instead (kernels/cuda/matmul.h
  // TcGemmOptions::split_small_int8: more precise, slower above 8 tokens). Opt-in.
  bool split_small_int8 = false;
  // 1..4-token split-rows GEMVs (decode steps, verify rows) on int8 tensor cores
  // (TcGemmOptions::split_gemv_mma); false: the dp4a / float dot GEMV.
  bool split_gemv_mma = false;
  // TcGemmOptions::mma_prequant_min: from this many tokens the down projection's activations are
  // quantized once by their own launch (bench --mma-prequant-min).
  size_t mma_prequant_min = 2;
  // Q8_0 matrices whose width is a multiple of 512 are uploaded in the split-rows layout
  // (common/q8_split.h: each row's quants, then its scales; same bytes) so the decode GEMV reads
  // them with coalesced 16-byte loads (kernels/cuda/gemv_q8_split.cu); every CUDA consumer reads
  // both layouts with identical weights. false: GGUF order everywhere.
  bool q8_split = true;
  // Every decode-path kernel (GEMV, small-batch GEMMs, norms, activations, conv + L2, GDN,
  // attention prep and decode attention, embed / gather / scatter, logit digest) as a programmatic
  // dependent launch, through the backend stream's entry in kernels/cuda/dependent_launch.h: on by
  // default (H200, 2026-11-29: 9B tg128 304.1 vs 276.2 tok/s; same bits, tests/kernels/cuda/
  // test_cuda_dependent_launch.cpp). deltaserve-bench --no-pdl switches it off.
  bool decode_pdl = true;
};
std::unique_ptr<Backend> make_cuda_backend(int device, CudaBackendOptions options = {});

}  // namespace ds
