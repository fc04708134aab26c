// CUDA twin of kernels/cpu/matmul.h: y = W x for a batch of tokens, W in its GGUF type (Q8_0 /
// F16 / BF16 / F32; `w.data` is a DEVICE pointer, rows at w.data + r*w.row_bytes), f32 in, f32
// accumulation, f32 out. x: [n_tokens, cols] (row stride x_stride), y: [n_tokens, rows] (row
// stride y_stride). Small batches (decode) use a GEMV with one warp per output row; larger ones a
// shared-memory tiled GEMM. Q8_0 weights take faster paths (kernels/cuda/matmul_fast.h): a
// streaming GEMV (f32 math) for n_tokens <= kGemvMaxTokens. With precision kBf16TensorCores
// (the CUDA backend's default, chosen by the caller): for n_tokens >= kTcMinTokens a bf16
// tensor-core GEMM with f32 accumulation (weights d*q and activations rounded to bf16: each output
// within 2^-8 * sum|w x| of the f32 result), run by cuBLASLt (default) or our mma.sync kernel
// (TcGemmOptions; cuBLASLt is the faster on the 9B shapes: docs/PERFORMANCE.md, Decisions
// measured). Its model-level error is bounded on a well-conditioned synthetic model
// (tests/kernels/cuda/test_cuda_model_bf16.cpp); the random-weight fixture amplifies rounding
// ~10^4x, so its tests ask for kF32. It keeps grow-only device scratch per (device, stream): its
// first use on a stream allocates (not capturable in a CUDA graph then).
// Returns cudaErrorNotSupported for other weight types; other status
// codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/matmul.h"  // WeightView (a plain descriptor; here its data is on the device)

namespace ds::cuda {

using cpu::WeightView;

// Batches of at most this many tokens take the GEMV path.
inline constexpr size_t kGemvMaxTokens = 8;
// Batches of at least this many tokens with Q8_0 weights take the bf16 tensor-core GEMM (opt-in).
inline constexpr size_t kTcMinTokens = 16;

// How batched (prefill) products may be computed.
enum class MatmulPrecision {
  kF32,              // f32 math everywhere (matches the CPU reference to f32 rounding)
  kBf16TensorCores,  // Q8_0 batches >= kTcMinTokens on bf16 tensor cores, f32 accumulation (backend default)
};

// Which bf16 GEMM runs the tensor-core products (kBf16TensorCores). Both see the same bf16
// operands and accumulate in f32, so they differ only in summation order (same error bound).
enum class TcGemmKernel {
  kCublasLt,  // cuBLASLt, algorithm chosen once per shape (default; falls back to kMmaSync when
              // cuBLASLt has no algorithm for a shape)
  kMmaSync,   // our mma.sync m16n8k16 kernel (kernels/cuda/gemm_tc.cu)
};

// Where the rows of one product go, for a stacked matrix whose output splits into separate
// arrays: rows [first[i], first[i+1]) of token t to y[i] + t * ys[i] + (r - first[i]). Segments
// are in row order and cover every row.
inline constexpr int kMaxRowSegments = 4;
struct RowSegments {
  int n = 0;
  size_t first[kMaxRowSegments + 1] = {};
  float* y[kMaxRowSegments] = {};
  size_t ys[kMaxRowSegments] = {};
  static RowSegments whole(float* y, size_t rows, size_t ys) {
    RowSegments s;
    s.n = 1;
    s.first[1] = rows;
    s.y[0] = y;
    s.ys[0] = ys;
    return s;
  }
};

// How the Q8_0 products of one call run. The defaults are what the CUDA backend uses in production
// (one set: TcGemmOptions{} is the production dispatch); the bench's ablations change a field.
struct TcGemmOptions {
  TcGemmKernel kernel = TcGemmKernel::kCublasLt;
  // Optional persistent bf16 copy of the Q8_0 weights ([rows][cols] row-major, device memory,
  // made by dequantize_q8_to_bf16): skips the per-call dequantization. nullptr: dequantize per call.
  const void* bf16_weights = nullptr;
  // Split-rows batches of kGemvSplitBestTokens + 1 .. detail::kSplitSmallMaxTokens (64) tokens in
  // the bf16 precision mode on the small-batch bf16 tensor-core GEMM over split rows (matmul_fast.h
  // gemm_q8_split_small: the prefill GEMM's operands without its dequantization pass; batched
  // decode, speculative verify). false (an ablation): the split GEMV up to 8 tokens, the SIMT GEMM
  // for 9..15 and the tensor-core GEMM from kTcMinTokens.
  bool split_small = true;
  // The 1..4-token split-rows GEMV (decode steps, speculative verify rows) on int8 tensor cores
  // (matmul_fast.h kGemvSplitMmaVariant: one instruction stream for 1..4 tokens, so a verify row of
  // 1 + 3 reads the weights at the cost of one token; activations as two int8 levels, 2^-16 of
  // their block's max) instead of the dp4a / float dot GEMV (the default).
  bool split_gemv_mma = false;
};
// With split_gemv_mma, matmul_swiglu_decode quantizes the down projection's SwiGLU'd activations
// once, by a launch of their own, from this many tokens on (given a scratch; same bits either way).
inline constexpr size_t kMmaPrequantMinTokens = 2;
// The split-rows GEMV and the small-batch GEMMs are programmatic dependent launches (sm_90+: their
// weight loads start while the previous kernel finishes; same bits) when the stream's switch is on
// (dependent_launch.h), like every other decode-path kernel; the CUDA backend sets it.

cudaError_t matmul(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, float* y, size_t y_stride,
                   MatmulPrecision precision, const TcGemmOptions& tc, cudaStream_t stream);

// The product of a stacked matrix written to row segments (RowSegments) in one pass. Only where
// matmul() would run each segment on the split-rows GEMV (1..kGemvSplitBestTokens tokens, any
// precision), on the small-batch GEMM over split rows (bf16 mode, kGemvSplitBestTokens + 1 ..
// detail::kSplitSmallMaxTokens tokens, tc.split_small) or on the tensor-core GEMM (prefill): cudaErrorNotSupported
// otherwise, and the caller runs one product per segment.
cudaError_t matmul_rows(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, const RowSegments& out,
                        MatmulPrecision precision, const TcGemmOptions& tc, cudaStream_t stream);

// y = W (silu(gate) * up) in one launch where matmul() would run the split-rows decode GEMV (1..4
// tokens; gate / up rows at stride x_stride): the same bits as swiglu then matmul.
// cudaErrorNotSupported elsewhere, and the caller runs the two ops. act_scratch (optional, 16-byte
// aligned, matmul_swiglu_act_bytes(w.cols)): on the tensor-core GEMV (tc.split_gemv_mma) from
// kMmaPrequantMinTokens tokens on, the SwiGLU'd activations are quantized once into it by a launch of
// their own instead of in every block of the GEMV (the same bits).
cudaError_t matmul_swiglu_decode(const WeightView& w, const float* gate, const float* up, size_t x_stride,
                                 size_t n_tokens, float* y, size_t y_stride, const TcGemmOptions& tc,
                                 cudaStream_t stream, void* act_scratch = nullptr);
size_t matmul_swiglu_act_bytes(size_t cols);

inline cudaError_t matmul(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, float* y,
                          size_t y_stride, MatmulPrecision precision, cudaStream_t stream) {
  return matmul(w, x, x_stride, n_tokens, y, y_stride, precision, TcGemmOptions{}, stream);
}

inline cudaError_t matmul(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, float* y,
                          size_t y_stride, cudaStream_t stream) {
  return matmul(w, x, x_stride, n_tokens, y, y_stride, MatmulPrecision::kF32, stream);
}

// Writes W (Q8_0, device) as bf16 [rows][cols] to `out` (rows * cols * 2 bytes, 16-byte aligned):
// each weight d * q rounded to nearest even, exactly what the tensor-core GEMM uses per call.
// v2: the faster kernel where it applies (what every product uses); false: v1 (tests, kernel lab);
// same bits either way.
// Also takes Q8_0_SPLIT (16-byte aligned rows; its own kernel, v2 ignored): the same bits as the
// matrix in GGUF order.
cudaError_t dequantize_q8_to_bf16(const WeightView& w, void* out, cudaStream_t stream, bool v2 = true);

// Creates the GEMM library's handle and the stream's fixed workspace now (call at start-up).
cudaError_t prepare_tc_gemm(cudaStream_t stream);

}  // namespace ds::cuda
