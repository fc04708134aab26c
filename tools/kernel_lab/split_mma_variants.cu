// The split-rows tensor-core decode GEMV in both block shapes (variants_lab.h).
#include "kernels/cuda/gemv_q8_split_mma_kernels.cuh"
#include "tools/kernel_lab/variants_lab.h"

namespace ds::kernel_lab {

cudaError_t gemv_q8_split_mma_shape(int shape, const cpu::WeightView& w, const float* x, const float* up, size_t xs,
                                    size_t n, const cuda::RowSegments& out, cudaStream_t stream, bool pdl,
                                    void* act_scratch) {
  return cuda::detail::launch_split_mma(shape, w, x, up, xs, n, out, stream, pdl, act_scratch);
}

}  // namespace ds::kernel_lab
