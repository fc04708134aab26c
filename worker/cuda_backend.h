// The CUDA backend: device memory from cudaMalloc, weights uploaded once from the GGUF mapping,
// every op a launcher from kernels/cuda on one stream. Only built with DELTASERVE_HAVE_CUDA.
#pragma once

#include <memory>

#include "worker/backend.h"

namespace ds {

// A backend on CUDA device `device`. Throws std::runtime_error when the device does not exist or a
// CUDA call fails (the message names the call, the source location and the CUDA error).
//
// The decisions a server makes (worker/daemon/stage_loader.cpp fills them from the worker's flags).
struct CudaBackendOptions {
  // Q8_0 prefill products (>= 16 tokens) and prefill attention on bf16 tensor cores with f32
  // accumulation (default).
  // false: f32 SIMT products, equal to the CPU path up to f32 rounding order; the parity tests on
  // the random-weight fixture ask for this, because that fixture amplifies rounding ~10^4x (the
  // bf16 path is bounded on a well-conditioned synthetic model instead: test_cuda_model_bf16.cpp).
  bool bf16_prefill = true;
  // Keep a bf16 copy of each Q8_0 matrix once it is used in a bf16 prefill product (2 bytes per
  // weight: ~18 GB more for 9B), instead of dequantizing it on every call. Off by default; when
  // the copy does not fit, that matrix keeps the per-call dequantization.
  bool bf16_weight_copy = false;
  // 1..4-token split-rows GEMVs (decode steps, verify rows) on int8 tensor cores
  // (cuda::TcGemmOptions::split_gemv_mma); false: the dp4a / float dot GEMV. worker/decode_gemv.h
  // resolves --decode-gemv auto|dp4a|mma into it.
  bool split_gemv_mma = false;
};

// Measurement switches: each turns one production choice off, for deltaserve-bench's --ablate and
// for the tests that compare a fused or fast path with the one it replaces. The defaults are the
// production choices, and nothing but the bench and the tests fills this.
struct CudaAblations {
  // Which GEMM runs the bf16 prefill products (kernels/cuda/matmul.h, TcGemmKernel): cuBLASLt (the
  // fastest measured, docs/PERFORMANCE.md) or our mma.sync kernel. Same operands, same bound.
  enum class PrefillGemm { kCublasLt, kMmaSync };
  PrefillGemm prefill_gemm = PrefillGemm::kCublasLt;
  // Decode steps digest the logits on the device (kernels/cuda/logit_digest.h) and download the
  // digest only, when the step asks for digests and every row's rule allows it (greedy, or
  // top_k <= 64); false: the logits are always downloaded and digested on the host.
  bool device_logit_digest = true;
  // Fused decode ops, one kernel each: Backend::add_rms_norm (residual add + the next RMSNorm,
  // norm.cu) and Backend::conv_silu_l2_token (GDN conv + SiLU + q/k L2 norm of one token,
  // conv_l2_decode.cu); and the GDN decode of all sequences of a step in one launch per layer
  // (Backend::conv_silu_l2_slots, gdn_decode_slots; its raw-gate form computes the gates in that
  // launch too), likewise the attention of all one-token sequences
  // (Backend::attention_batch), and an attention layer's q/k norm + rope + K/V cache write
  // (Backend::attention_prep, attention_prep.cu); false: the separate ops, per sequence.
  bool fused_decode_ops = true;
  // Backend::weight_stack: matrices that share an input (GDN alpha+beta, qkv+gate, FFN gate+up)
  // uploaded as one stacked matrix so decode runs one GEMV for them; false: separate uploads.
  bool stacked_weights = true;
  // Chunked GDN prefill prep and state pass on tensor cores (cuda::GdnPrep::kTensorCores and
  // GdnMath::kTensorCores: tf32 mma.sync, f32 state; gdn_chunked.h) when bf16_prefill is on; the
  // f32 prefill mode always keeps the f32 kernels (the fixture-model tests rely on them). false:
  // f32 in both modes (the v3 prep, which falls back to v2 for shapes it does not take).
  bool gdn_tensor_cores = true;
  // Prefill fusions, each bit-identical to the ops it replaces (false runs those): the FFN's SwiGLU
  // rounded straight into the down projection's bf16 operand (kernels/cuda/swiglu_matmul.h), and
  // the GDN q/k head L2 norms in one launch (kernels/cuda/l2_norm_heads.h).
  bool prefill_fusions = true;
  // Split-rows products of 5..64 tokens in the bf16 mode on the small-batch bf16 GEMM over split
  // rows (cuda::TcGemmOptions::split_small; batched decode, verify rows): weights read once per
  // call, no dequantization pass. false: the split GEMV (<= 8 tokens), the SIMT GEMM and the
  // prefill GEMM.
  bool split_small = true;
  // Q8_0 matrices whose width is a multiple of 512 are uploaded in the split-rows layout
  // (common/q8_split.h: each row's quants, then its scales; same bytes) so the decode GEMV reads
  // them with coalesced 16-byte loads (kernels/cuda/gemv_q8_split.cu); every CUDA consumer reads
  // both layouts with identical weights. false: GGUF order everywhere.
  bool q8_split = true;
  // Every decode-path kernel (GEMV, small-batch GEMMs, norms, activations, conv + L2, GDN,
  // attention prep and decode attention, embed / gather / scatter, logit digest) as a programmatic
  // dependent launch, through the backend stream's entry in kernels/cuda/dependent_launch.h (same
  // bits, tests/kernels/cuda/test_cuda_dependent_launch.cpp; faster decode, docs/PERFORMANCE.md).
  bool decode_pdl = true;
};

std::unique_ptr<Backend> make_cuda_backend(int device, CudaBackendOptions options = {}, CudaAblations ablations = {});

}  // namespace ds
