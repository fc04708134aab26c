#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matmul_fast.h"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda {
namespace {

using detail::kWarp;
using detail::WeightRow;

// ---- GEMV: one warp per output row, all tokens of the batch at once ---------------------------
// Each lane dequantizes 8 consecutive weights per step (a warp covers 256 columns), so every weight
// byte is read once per batch and the reads of a warp are contiguous.

constexpr int kGemvWarps = 4;

template <GgmlType T, int NT>
__global__ void gemv_kernel(const uint8_t* w, size_t rows, size_t cols, size_t row_bytes, const float* x, size_t xs,
                            size_t n_tokens, float* y, size_t ys) {
  const size_t r = size_t{blockIdx.x} * kGemvWarps + threadIdx.x / kWarp;
  if (r >= rows) return;
  const unsigned lane = threadIdx.x % kWarp;
  const uint8_t* wr = w + r * row_bytes;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;

  const size_t cols8 = cols / 8 * 8;
  for (size_t c = size_t{lane} * 8; c < cols8; c += 8 * kWarp) {
    float wv[8];
    WeightRow<T>::eight(wr, c, cols, wv);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < static_cast<int>(n_tokens)) {
        const float* xt = x + t * xs + c;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[t] += wv[j] * xt[j];
      }
    }
  }
  for (size_t c = cols8 + lane; c < cols; c += kWarp) {  // tail of a row that is not a multiple of 8
    const float wv = WeightRow<T>::one(wr, c, cols);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < static_cast<int>(n_tokens)) acc[t] += wv * x[t * xs + c];
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float sum = detail::warp_sum(acc[t]);
    if (lane == 0 && t < static_cast<int>(n_tokens)) y[t * ys + r] = sum;
  }
}

// ---- GEMM: 64 rows x 64 tokens per block, K in steps of 32 -------------------------------------
// The weight tile is dequantized once into shared memory (k-major) and reused by 64 tokens; each of
// the 256 threads accumulates a 4x4 register tile. Straightforward SIMT f32 — tensor cores and bf16
// activations are left to the speed issues.

constexpr int kBM = 64, kBN = 64, kBK = 32, kGemmThreads = 256;
constexpr int kPad = 4;  // keeps rows 16-byte aligned for float4 reads and spreads the banks

// Loads this thread's 8 weights (row lr, columns lk..lk+7 of the K step) of the tile, zero outside.
template <GgmlType T>
__device__ __forceinline__ void load_w_tile(const uint8_t* w, size_t rows, size_t cols, size_t row_bytes, size_t r,
                                            size_t c, float* wv) {
  if (r < rows && c + 8 <= cols) {
    WeightRow<T>::eight(w + r * row_bytes, c, cols, wv);
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    wv[j] = (r < rows && c + j < cols) ? WeightRow<T>::one(w + r * row_bytes, c + j, cols) : 0.0f;
  }
}

template <GgmlType T>
__global__ void __launch_bounds__(kGemmThreads)
    gemm_kernel(const uint8_t* w, size_t rows, size_t cols, size_t row_bytes, const float* x, size_t xs,
                size_t n_tokens, float* y, size_t ys) {
  __shared__ __align__(16) float ws[kBK][kBM + kPad];
  __shared__ __align__(16) float xsh[kBK][kBN + kPad];
  const size_t m0 = size_t{blockIdx.x} * kBM, n0 = size_t{blockIdx.y} * kBN;
  const int tid = static_cast<int>(threadIdx.x);
  const int ty = tid / 16, tx = tid % 16;      // compute: rows ty*4.., tokens tx*4..
  const int lr = tid / 4, lk = (tid % 4) * 8;  // load: row/token lr, columns lk..lk+7

  float acc[4][4] = {};
  for (size_t k0 = 0; k0 < cols; k0 += kBK) {
    float wv[8];
    load_w_tile<T>(w, rows, cols, row_bytes, m0 + lr, k0 + lk, wv);
    const size_t t = n0 + lr;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      ws[lk + j][lr] = wv[j];
      const size_t c = k0 + lk + j;
      xsh[lk + j][lr] = (t < n_tokens && c < cols) ? x[t * xs + c] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kBK; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(&ws[kk][ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&xsh[kk][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const size_t t = n0 + tx * 4 + j;
    if (t >= n_tokens) continue;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const size_t r = m0 + ty * 4 + i;
      if (r < rows) y[t * ys + r] = acc[i][j];
    }
  }
}

// ---- dispatch ---------------------------------------------------------------------------------

template <GgmlType T, int NT>
void launch_gemv(const WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys, cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>((w.rows + kGemvWarps - 1) / kGemvWarps);
  gemv_kernel<T, NT><<<grid, kGemvWarps * kWarp, 0, s>>>(static_cast<const uint8_t*>(w.data), w.rows, w.cols,
                                                         w.row_bytes, x, xs, n, y, ys);
}

template <GgmlType T>
void launch_typed(const WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys, cudaStream_t s) {
  if (n == 1) return launch_gemv<T, 1>(w, x, xs, n, y, ys, s);
  if (n == 2) return launch_gemv<T, 2>(w, x, xs, n, y, ys, s);
  if (n <= 4) return launch_gemv<T, 4>(w, x, xs, n, y, ys, s);
  if (n <= kGemvMaxTokens) return launch_gemv<T, 8>(w, x, xs, n, y, ys, s);
  const dim3 grid(static_cast<unsigned>((w.rows + kBM - 1) / kBM), static_cast<unsigned>((n + kBN - 1) / kBN));
  gemm_kernel<T>
      <<<grid, kGemmThreads, 0, s>>>(static_cast<const uint8_t*>(w.data), w.rows, w.cols, w.row_bytes, x, xs, n, y, ys);
}

cudaError_t check_args(const WeightView& w, const float* x, size_t xs, size_t n, const float* y, size_t ys) {
  if (!detail::weight_type_supported(w.type)) return cudaErrorNotSupported;
  if (w.data == nullptr || x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  if (!detail::aligned_to(x, 4) || !detail::aligned_to(y, 4)) return cudaErrorMisalignedAddress;
  const size_t align = detail::weight_alignment(w.type);
  if (!detail::aligned_to(w.data, align) || w.row_bytes % align != 0) return cudaErrorMisalignedAddress;
  if (detail::is_q8_0(w.type) && w.cols % detail::kQ8Block != 0) return cudaErrorInvalidValue;
  if (w.row_bytes < ggml_row_bytes(w.type, w.cols)) return cudaErrorInvalidValue;
  if ((n > 1 && xs < w.cols) || (n > 1 && ys < w.rows)) return cudaErrorInvalidValue;
  if ((w.rows + kGemvWarps - 1) / kGemvWarps > detail::kMaxGridX || (n + kBN - 1) / kBN > 65535) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

// Whether matmul() sends a split-rows product to the small-batch bf16 GEMM (bf16 mode only).
bool takes_split_small(const WeightView& w, const float* x, size_t xs, size_t n, const float* y, size_t ys,
                       MatmulPrecision precision, const TcGemmOptions& tc) {
  return precision == MatmulPrecision::kBf16TensorCores && tc.split_small && n > detail::kGemvSplitBestTokens &&
         n <= detail::kSplitSmallMaxTokens && detail::gemm_q8_split_small_applies(w, x, xs, y, ys, n);
}

int split_gemv_variant(const TcGemmOptions& tc) {
  return tc.split_gemv_mma ? detail::kGemvSplitMmaVariant : detail::kGemvSplitDefaultVariant;
}

// Every segment of a stacked product is a valid product of its own (matmul's checks on its row
// range of w and its output), and the segments cover the rows in order.
bool segments_valid(const WeightView& w, const float* x, size_t xs, size_t n, const RowSegments& out) {
  if (!detail::row_segments_fit(out, w.rows, n)) return false;
  for (int i = 0; i < out.n; ++i) {
    const WeightView seg = cpu::row_range(w, out.first[i], out.first[i + 1] - out.first[i]);
    if (check_args(seg, x, xs, n, out.y[i], out.ys[i]) != cudaSuccess) return false;
  }
  return true;
}

}  // namespace

cudaError_t matmul_swiglu_decode(const WeightView& w, const float* gate, const float* up, size_t x_stride,
                                 size_t n_tokens, float* y, size_t y_stride, const TcGemmOptions& tc,
                                 cudaStream_t stream, void* act_scratch) {
  // The products matmul() gives the split-rows GEMV: up to kGemvSplitBestTokens tokens (more go to
  // the small-batch GEMM in bf16 mode, or run as two GEMV launches).
  if (n_tokens == 0 || n_tokens > detail::kGemvSplitBestTokens || gate == nullptr || up == nullptr || y == nullptr) {
    return cudaErrorNotSupported;
  }
  if (check_args(w, gate, x_stride, n_tokens, y, y_stride) != cudaSuccess ||
      !detail::gemv_q8_split_applies(w, gate, x_stride, n_tokens) || !detail::aligned_to(up, 16)) {
    return cudaErrorNotSupported;
  }
  void* acts = n_tokens >= kMmaPrequantMinTokens ? act_scratch : nullptr;
  return detail::gemv_q8_split_swiglu_variant(split_gemv_variant(tc), w, gate, up, x_stride, n_tokens, y, y_stride,
                                              stream, dependent_launches(stream), acts);
}

size_t matmul_swiglu_act_bytes(size_t cols) {
  return detail::gemv_q8_split_mma_act_bytes(cols);
}

cudaError_t matmul(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, float* y, size_t y_stride,
                   MatmulPrecision precision, const TcGemmOptions& tc, cudaStream_t stream) {
  if (!detail::weight_type_supported(w.type)) return cudaErrorNotSupported;
  if (w.rows == 0 || n_tokens == 0) return cudaSuccess;
  if (const cudaError_t e = check_args(w, x, x_stride, n_tokens, y, y_stride); e != cudaSuccess) return e;
  // Q8_0 fast paths (matmul_fast.h): in bf16 mode, split rows of 5..64 tokens on the small-batch
  // bf16 GEMM (batched decode, verify rows); the split-rows GEMV (the CUDA backend's default layout;
  // batch-invariant up to kGemvSplitBestTokens, so a 1+3 speculative verify row has the bits of a
  // plain decode step); bf16 tensor cores for prefill (bf16 mode); the GGUF-order streaming GEMV
  // for decode; else the SIMT GEMV / GEMM below.
  if (takes_split_small(w, x, x_stride, n_tokens, y, y_stride, precision, tc)) {
    return detail::gemm_q8_split_small(w, x, x_stride, n_tokens, y, y_stride, stream, dependent_launches(stream));
  }
  if (detail::gemv_q8_split_applies(w, x, x_stride, n_tokens)) {
    return detail::gemv_q8_split_variant(split_gemv_variant(tc), w, x, x_stride, n_tokens, y, y_stride, stream,
                                         dependent_launches(stream));
  }
  if (precision == MatmulPrecision::kBf16TensorCores && detail::gemm_q8_tc_applies(w, n_tokens)) {
    return detail::gemm_q8_tc(w, x, x_stride, n_tokens, y, y_stride, tc, stream);
  }
  if (detail::gemv_q8_applies(w, x, x_stride, n_tokens)) {
    return detail::gemv_q8(w, x, x_stride, n_tokens, y, y_stride, stream);
  }
  switch (w.type) {
    case GgmlType::F32:
      launch_typed<GgmlType::F32>(w, x, x_stride, n_tokens, y, y_stride, stream);
      break;
    case GgmlType::F16:
      launch_typed<GgmlType::F16>(w, x, x_stride, n_tokens, y, y_stride, stream);
      break;
    case GgmlType::BF16:
      launch_typed<GgmlType::BF16>(w, x, x_stride, n_tokens, y, y_stride, stream);
      break;
    case GgmlType::Q8_0:
      launch_typed<GgmlType::Q8_0>(w, x, x_stride, n_tokens, y, y_stride, stream);
      break;
    case GgmlType::Q8_0_SPLIT:
      launch_typed<GgmlType::Q8_0_SPLIT>(w, x, x_stride, n_tokens, y, y_stride, stream);
      break;
    default:
      return cudaErrorNotSupported;
  }
  return detail::launch_status();
}

cudaError_t matmul_rows(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, const RowSegments& out,
                        MatmulPrecision precision, const TcGemmOptions& tc, cudaStream_t stream) {
  if (out.n < 1 || n_tokens == 0) return cudaErrorNotSupported;
  // Decode-sized (speculative verify rows): the split-rows GEMV, in any precision, as matmul()
  // runs each part (same bits per row), one launch for the stack.
  if (n_tokens <= detail::kGemvSplitBestTokens) {
    if (!detail::gemv_q8_split_applies(w, x, x_stride, n_tokens) || !segments_valid(w, x, x_stride, n_tokens, out)) {
      return cudaErrorNotSupported;
    }
    return detail::gemv_q8_split_rows_variant(split_gemv_variant(tc), w, x, x_stride, n_tokens, out, stream,
                                              dependent_launches(stream));
  }
  if (precision != MatmulPrecision::kBf16TensorCores) return cudaErrorNotSupported;
  if (tc.split_small && n_tokens <= detail::kSplitSmallMaxTokens) {
    if (!detail::gemm_q8_split_small_applies(w, x, x_stride, out.y[0], w.rows, n_tokens)) return cudaErrorNotSupported;
    return detail::gemm_q8_split_small_rows(w, x, x_stride, n_tokens, out, stream, dependent_launches(stream));
  }
  // Prefill: where each segment's own product would take the tensor-core GEMM (as matmul() decides
  // past the small-batch GEMM's range), one activation conversion.
  if (!detail::gemm_q8_tc_applies(w, n_tokens) || !segments_valid(w, x, x_stride, n_tokens, out)) {
    return cudaErrorNotSupported;
  }
  return detail::gemm_q8_tc_rows(w, x, x_stride, n_tokens, out, tc, stream);
}

}  // namespace ds::cuda
