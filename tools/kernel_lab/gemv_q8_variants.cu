// The GGUF-order decode GEMV in every launch shape (variants_lab.h).
#include "kernels/cuda/gemv_q8_kernels.cuh"
#include "tools/kernel_lab/variants_lab.h"

namespace ds::kernel_lab {

cudaError_t gemv_q8_shape(int shape, const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                          cudaStream_t stream) {
  using namespace ds::cuda::detail;
  if (w.type != GgmlType::Q8_0) return cudaErrorNotSupported;
  switch (shape) {
    case 0:
      return launch_tokens<8, 1, 2>(w, x, xs, n, y, ys, stream);
    case 1:
      return launch_tokens<8, 2, 1>(w, x, xs, n, y, ys, stream);
    case 2:
      return launch_tokens<4, 1, 4>(w, x, xs, n, y, ys, stream);
    case 3:
      return launch_tokens<4, 2, 2>(w, x, xs, n, y, ys, stream);
    case 4:
      return launch_tokens<16, 1, 1>(w, x, xs, n, y, ys, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ds::kernel_lab
