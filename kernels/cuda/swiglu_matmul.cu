// The argument checks of swiglu_matmul (swiglu_matmul.h); the work is gemm_tc.cu's per-call
// bf16 GEMM with the SwiGLU as its activation conversion (detail::swiglu_gemm_q8_tc).
#include "common/ggml_types.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul_fast.h"
#include "kernels/cuda/swiglu_matmul.h"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda {

bool swiglu_matmul_applies(const WeightView& w, size_t n_tokens) {
  return detail::gemm_q8_tc_applies(w, n_tokens);
}

cudaError_t swiglu_matmul(const WeightView& w, const float* gate, const float* up, size_t n_tokens, float* y,
                          size_t y_stride, const TcGemmOptions& tc, cudaStream_t stream) {
  if (!swiglu_matmul_applies(w, n_tokens)) return cudaErrorNotSupported;
  if (w.data == nullptr || gate == nullptr || up == nullptr || y == nullptr) return cudaErrorInvalidValue;
  const size_t align = detail::weight_alignment(w.type);  // 2, or 16 for split rows
  if (!detail::aligned_to(gate, 4) || !detail::aligned_to(up, 4) || !detail::aligned_to(y, 4) ||
      !detail::aligned_to(w.data, align) || w.row_bytes % align != 0) {
    return cudaErrorMisalignedAddress;
  }
  if (w.row_bytes < ggml_row_bytes(w.type, w.cols) || y_stride < w.rows) return cudaErrorInvalidValue;
  if (w.rows == 0) return cudaSuccess;
  return detail::swiglu_gemm_q8_tc(w, gate, up, n_tokens, y, y_stride, tc, stream);
}

}  // namespace ds::cuda
