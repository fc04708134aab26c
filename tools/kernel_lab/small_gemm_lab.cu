// deltaserve-kernel-lab --gemm-split: the small-batch GEMM over split rows (batched
// decode) at the 9B shapes, each matrix alone and a whole step's matrices queued (see kernel_lab.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "common/q8_split.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matmul_fast.h"
#include "tools/kernel_lab/lab_common.cuh"
#include "tools/kernel_lab/small_gemm_lab.h"
#include "tools/kernel_lab/variants_lab.h"

using namespace ds::kernel_lab;

namespace {

// The matrices of a 9B multi-token step (unstacked).
const StepShape kMultiTokenShapes[] = {
    {"ffn_gate/up 12288x4096", 12288, 4096, 64}, {"ffn_down 4096x12288", 4096, 12288, 32},
    {"qkv/attn_q 8192x4096", 8192, 4096, 32},    {"z/out/o 4096x4096", 4096, 4096, 56},
    {"attn_k/v 1024x4096", 1024, 4096, 16},      {"ssm_alpha/beta 32x4096", 32, 4096, 48},
    {"lm_head 248320x4096", 248320, 4096, 1}};

// Those matrices (each rotated over copies beyond L2), activations and outputs for up to 64
// tokens, and one step's weight bytes.
struct StepMatrices {
  std::vector<std::unique_ptr<Q8Matrix>> mats;
  float* x = device_f32(64 * 12288, 3);
  float* y = device_f32(64 * 248320, 4);
  double step_bytes = 0;
  StepMatrices() {
    for (const StepShape& sh : kMultiTokenShapes) {
      mats.push_back(std::make_unique<Q8Matrix>(sh.rows, sh.cols, size_t{256} << 20));
      step_bytes += static_cast<double>(sh.rows * mats.back()->row_bytes) * sh.per_step;
    }
  }
  ~StepMatrices() {
    LAB_CHECK(cudaFree(x));
    LAB_CHECK(cudaFree(y));
  }
  StepMatrices(const StepMatrices&) = delete;
  StepMatrices& operator=(const StepMatrices&) = delete;
};

}  // namespace

// ---- Small-batch GEMM over split rows (kernels/cuda/gemm_q8_split_small.cu, batched decode)
// against the dispatch without it for the same split-rows matrix (the split GEMV <= 8 tokens, the
// SIMT GEMM for 9..15, dequantization + cuBLASLt beyond), at the 9B shapes of a multi-token step, each step's matrices
// also queued back to back. ----
void gemm_split(int reps) {
  const auto& shapes = kMultiTokenShapes;
  const size_t ns[] = {5, 8, 16, 32, 64};
  StepMatrices step;
  const auto& mats = step.mats;
  float *x = step.x, *y = step.y;
  const double step_bytes = step.step_bytes;
  const auto run = [&](size_t i, int copy, size_t n, bool small) {
    const ds::cuda::WeightView v = mats[i]->view(copy, ds::GgmlType::Q8_0_SPLIT);
    const ds::cuda::TcGemmOptions tc{.split_small = small};
    LAB_CHECK(ds::cuda::matmul(v, x, shapes[i].cols, n, y, shapes[i].rows, ds::cuda::MatmulPrecision::kBf16TensorCores,
                               tc, nullptr));
  };
  for (size_t i = 0; i < mats.size(); ++i) {
    for (size_t n : ns) {
      const double cur = median_ms(reps, [&](int c) { run(i, c, n, false); });
      const double neu = median_ms(reps, [&](int c) { run(i, c, n, true); });
      const double v1 = median_ms(reps, [&](int c) {
        LAB_CHECK(ds::kernel_lab::gemm_q8_split_small_variant(1, mats[i]->view(c, ds::GgmlType::Q8_0_SPLIT), x,
                                                              shapes[i].cols, n, y, shapes[i].rows, nullptr, true));
      });
      const double bytes = static_cast<double>(shapes[i].rows * mats[i]->row_bytes);
      const auto pct = [&](double ms) { return 100 * bytes / (ms * 1e-3) / kHbm; };
      std::printf(
          "gemm-split n=%-2zu %-24s cur %8.1f us %5.1f%% | small %8.1f us %5.1f%% | v1 %8.1f us %5.1f%% "
          "(%d splits)\n",
          n, shapes[i].name, cur * 1e3, pct(cur), neu * 1e3, pct(neu), v1 * 1e3, pct(v1),
          ds::cuda::detail::gemm_q8_split_small_splits(shapes[i].rows, shapes[i].cols));
    }
  }
  for (size_t n : ns) {
    const auto queued = [&](bool small) {
      return median_ms(reps, [&](int rep) {
        int copy = rep * 7;
        for (size_t i = 0; i < mats.size(); ++i) {
          for (size_t j = 0; j < shapes[i].per_step; ++j, ++copy) run(i, copy, n, small);
        }
      });
    };
    const double cur = queued(false), neu = queued(true);
    const auto queued_variant = [&](int variant, bool dependent) {
      return median_ms(reps, [&](int rep) {
        int copy = rep * 7;
        for (size_t i = 0; i < mats.size(); ++i) {
          for (size_t j = 0; j < shapes[i].per_step; ++j, ++copy) {
            LAB_CHECK(
                ds::kernel_lab::gemm_q8_split_small_variant(variant, mats[i]->view(copy, ds::GgmlType::Q8_0_SPLIT), x,
                                                            shapes[i].cols, n, y, shapes[i].rows, nullptr, dependent));
          }
        }
      });
    };
    const double v0d = queued_variant(0, true), v1 = queued_variant(1, false), v1d = queued_variant(1, true);
    std::printf(
        "gemm-split 9B step n=%-2zu queued (%.2f GB)  cur %7.3f ms %5.1f%% | small %7.3f ms %5.1f%% "
        "(%.0f tok/s GEMM-only) | +pdl %7.3f | v1 %7.3f | v1+pdl %7.3f ms\n",
        n, step_bytes / 1e9, cur, 100 * step_bytes / (cur * 1e-3) / kHbm, neu, 100 * step_bytes / (neu * 1e-3) / kHbm,
        n / (neu * 1e-3), v0d, v1, v1d);
  }
}
