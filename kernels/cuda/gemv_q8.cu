// Decode GEMV for Q8_0 weights (see matmul_fast.h), v2: one LANE per output row.
//
// A block owns 32 consecutive rows; its W warps split the row's "quads" (4 Q8_0 blocks = 128
// weights = 136 bytes = 17 eight-byte words; 8-byte aligned whenever the row is): warp w takes
// quads w, w+W, ... For each quad the warp copies the 32 rows' 136 bytes (544 words, coalesced
// within each row) and the activations of those 128 columns (one float4 per lane and token)
// into its shared memory, then lane L dots row L's quad with them. Why this layout:
//  * every lane reads the same activations, so each x read is a shared-memory broadcast;
//    v1 read x from global memory inside the dot (one L2 round trip after another for a block
//    whose columns no other warp had touched), which left the GEMV latency-bound, far below
//    HBM bandwidth (measured: docs/history/performance-2026-11.md);
//  * the shared row stride is 35 words (odd), so the 32 lanes' reads of "word k of my row" hit
//    32 different banks;
//  * the next quad's weights and activations are loaded into registers (a ring of D quads)
//    before the current quad is computed, so loads stay in flight during the arithmetic.
// Quants are widened exactly (byte -> float by the 2^23 trick), summed per Q8_0 block in f32 and
// scaled by the block's d; the W warps' partial sums are added in a fixed order (deterministic).
#include "kernels/cuda/gemv_q8_kernels.cuh"
#include "kernels/cuda/matmul_fast.h"

namespace ds::cuda::detail {

bool gemv_q8_applies(const cpu::WeightView& w, const float* x, size_t xs, size_t n_tokens) {
  return w.type == GgmlType::Q8_0 && n_tokens >= 1 && n_tokens <= 8 && w.cols % kQuadCols == 0 &&
         aligned_to(w.data, 8) && w.row_bytes % 8 == 0 && aligned_to(x, 16) && (n_tokens == 1 || xs % 4 == 0) &&
         w.row_bytes * kRowsPerBlock < (size_t{1} << 32) && (w.rows + kRowsPerBlock - 1) / kRowsPerBlock <= kMaxGridX;
}

cudaError_t gemv_q8_variant(int variant, const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y,
                            size_t ys, cudaStream_t stream) {
  if (w.type != GgmlType::Q8_0) return cudaErrorNotSupported;  // GGUF block order only (split rows: gemv_q8_split)
  switch (variant) {  // gemv_q8_kernels.cuh; the lab's other shapes: tools/kernel_lab/variants_lab.cu
    case kGemvDefaultVariant:
      return launch_tokens<8, 1, 2>(w, x, xs, n, y, ys, stream);
    case kGemvWideVariant:
      return launch_tokens<8, 2, 1>(w, x, xs, n, y, ys, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t gemv_q8(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                    cudaStream_t stream) {
  return gemv_q8_variant(n <= 2 ? kGemvDefaultVariant : kGemvWideVariant, w, x, xs, n, y, ys, stream);
}

}  // namespace ds::cuda::detail
