// The small-batch bf16 GEMM over split rows in either launch variant (variants_lab.h).
#include "kernels/cuda/gemm_q8_split_small_kernels.cuh"
#include "tools/kernel_lab/variants_lab.h"

namespace ds::kernel_lab {

cudaError_t gemm_q8_split_small_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                        float* y, size_t ys, cudaStream_t stream, bool dependent) {
  if (variant < 0 || variant >= kSplitSmallVariants) return cudaErrorInvalidValue;
  if (w.type != GgmlType::Q8_0_SPLIT) return cudaErrorNotSupported;
  if (!cuda::detail::gemm_q8_split_small_applies(w, x, xs, y, ys, n)) return cudaErrorInvalidValue;
  return cuda::detail::run_segments(variant, w, x, xs, n, cuda::RowSegments::whole(y, w.rows, n > 1 ? ys : w.rows),
                                    stream, dependent);
}

}  // namespace ds::kernel_lab
