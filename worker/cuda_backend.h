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
};
std::unique_ptr<Backend> make_cuda_backend(int device, CudaBackendOptions options = {});

}  // namespace ds
