// The split-rows decode GEMV with either dot forced, next to production's variants (variants_lab.h).
#include "kernels/cuda/gemv_q8_split_kernels.cuh"
#include "tools/kernel_lab/variants_lab.h"

namespace ds::kernel_lab {
namespace {

bool forced(int variant) {
  return variant == kSplitInt8x3 || variant == kSplitFloat;
}

int production_variant(int variant) {
  return variant == kSplitMma ? cuda::detail::kGemvSplitMmaVariant : cuda::detail::kGemvSplitDefaultVariant;
}

// Production's checks (gemv_q8_split.cu run_variant), then the forced dot.
cudaError_t run_forced(int variant, const cpu::WeightView& w, const float* x, const float* up, size_t xs, size_t n,
                       const cuda::RowSegments& out, cudaStream_t stream, bool pdl) {
  if (!cuda::detail::gemv_q8_split_applies(w, x, xs, n)) return cudaErrorInvalidValue;
  if (up != nullptr && !cuda::detail::aligned_to(up, 16)) return cudaErrorInvalidValue;
  const auto dot = variant == kSplitInt8x3 ? cuda::detail::SplitDot::kInt8x3 : cuda::detail::SplitDot::kFloat;
  return cuda::detail::run_dot(dot, w, x, up, xs, n, out, stream, pdl);
}

}  // namespace

cudaError_t gemv_q8_split_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y,
                                  size_t ys, cudaStream_t stream, bool pdl) {
  if (variant < 0 || variant >= kSplitVariants) return cudaErrorInvalidValue;
  if (forced(variant))
    return run_forced(variant, w, x, nullptr, xs, n, cuda::RowSegments::whole(y, w.rows, ys), stream, pdl);
  return cuda::detail::gemv_q8_split_variant(production_variant(variant), w, x, xs, n, y, ys, stream, pdl);
}

cudaError_t gemv_q8_split_rows_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n,
                                       const cuda::RowSegments& out, cudaStream_t stream, bool pdl) {
  if (variant < 0 || variant >= kSplitVariants) return cudaErrorInvalidValue;
  if (!forced(variant)) {
    return cuda::detail::gemv_q8_split_rows_variant(production_variant(variant), w, x, xs, n, out, stream, pdl);
  }
  if (w.type != GgmlType::Q8_0_SPLIT) return cudaErrorNotSupported;
  if (!cuda::detail::row_segments_fit(out, w.rows, n)) return cudaErrorInvalidValue;
  return run_forced(variant, w, x, nullptr, xs, n, out, stream, pdl);
}

cudaError_t gemv_q8_split_swiglu_variant(int variant, const cpu::WeightView& w, const float* gate, const float* up,
                                         size_t xs, size_t n, float* y, size_t ys, cudaStream_t stream, bool pdl,
                                         void* act_scratch) {
  if (variant < 0 || variant >= kSplitVariants) return cudaErrorInvalidValue;
  if (!forced(variant)) {
    return cuda::detail::gemv_q8_split_swiglu_variant(production_variant(variant), w, gate, up, xs, n, y, ys, stream,
                                                      pdl, act_scratch);
  }
  if (up == nullptr) return cudaErrorInvalidValue;
  return run_forced(variant, w, gate, up, xs, n, cuda::RowSegments::whole(y, w.rows, ys), stream, pdl);
}

bool gemv_q8_split_int_dot(size_t rows, size_t cols, int variant) {
  if (forced(variant)) return variant == kSplitInt8x3;
  return cuda::detail::gemv_q8_split_int_dot(rows, cols);
}

}  // namespace ds::kernel_lab
