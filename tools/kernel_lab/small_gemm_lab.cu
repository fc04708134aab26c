// deltaserve-kernel-lab --gemm-split / --gemm-int8: the small-batch GEMMs over split rows (batched
// decode) at the 9B shapes, each matrix alone and a whole step's matrices queued (see kernel_lab.cu).
#include "tools/kernel_lab/small_gemm_lab.h"

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

using namespace ds::kernel_lab;

namespace {

// The matrices of a 9B multi-token step (unstacked), as both sections time them.
const StepShape kMultiTokenShapes[] = {
    {"ffn_gate/up 12288x4096", 12288, 4096, 64}, {"ffn_down 4096x12288", 4096, 12288, 32},
    {"qkv/attn_q 8192x4096", 8192, 4096, 32},    {"z/out/o 4096x4096", 4096, 4096, 56},
    {"attn_k/v 1024x4096", 1024, 4096, 16},      {"ssm_alpha/beta 32x4096", 32, 4096, 48},
    {"lm_head 248320x4096", 248320, 4096, 1}};

// Those matrices (each rotated over copies beyond L2), activations and outputs for up to 64
// tokens, and one step's weight bytes: what both sections time.
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
// against today's dispatch for the same split-rows matrix (3-term tensor-core GEMV <= 16 tokens,
// dequantization + cuBLASLt beyond), at the 9B shapes of a multi-token step, each step's matrices
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
    ds::cuda::TcGemmOptions tc{.small_batch_mma = true};
    tc.split_small_max = small ? 64 : 0;
    LAB_CHECK(ds::cuda::matmul(v, x, shapes[i].cols, n, y, shapes[i].rows, ds::cuda::MatmulPrecision::kBf16TensorCores,
                               tc, nullptr));
  };
  for (size_t i = 0; i < mats.size(); ++i) {
    for (size_t n : ns) {
      const double cur = median_ms(reps, [&](int c) { run(i, c, n, false); });
      const double neu = median_ms(reps, [&](int c) { run(i, c, n, true); });
      const double v1 = median_ms(reps, [&](int c) {
        LAB_CHECK(ds::cuda::detail::gemm_q8_split_small_variant(1, mats[i]->view(c, ds::GgmlType::Q8_0_SPLIT), x,
                                                                shapes[i].cols, n, y, shapes[i].rows, nullptr, true));
      });
      const double bytes = static_cast<double>(shapes[i].rows * mats[i]->row_bytes);
      const auto pct = [&](double ms) { return 100 * bytes / (ms * 1e-3) / kHbm; };
      std::printf("gemm-split n=%-2zu %-24s cur %8.1f us %5.1f%% | small %8.1f us %5.1f%% | v1 %8.1f us %5.1f%% "
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
            LAB_CHECK(ds::cuda::detail::gemm_q8_split_small_variant(
                variant, mats[i]->view(copy, ds::GgmlType::Q8_0_SPLIT), x, shapes[i].cols, n, y, shapes[i].rows,
                nullptr, dependent));
          }
        }
      });
    };
    const double v0d = queued_variant(0, true), v1 = queued_variant(1, false), v1d = queued_variant(1, true);
    std::printf("gemm-split 9B step n=%-2zu queued (%.2f GB)  cur %7.3f ms %5.1f%% | small %7.3f ms %5.1f%% "
                "(%.0f tok/s GEMM-only) | +pdl %7.3f | v1 %7.3f | v1+pdl %7.3f ms\n",
                n, step_bytes / 1e9, cur, 100 * step_bytes / (cur * 1e-3) / kHbm, neu,
                100 * step_bytes / (neu * 1e-3) / kHbm, n / (neu * 1e-3), v0d, v1, v1d);
  }
}

// ---- Small-batch GEMM over split rows on int8 tensor cores (kernels/cuda/gemm_q8_split_int8.cu)
// next to the bf16 one (gemm_q8_split_small.cu, its default variant), in the same call so the
// figures compare: each 9B matrix alone and a whole step's matrices queued as dependent launches
// (weights rotated beyond L2), for every int8 launch variant; then the accuracy of both against an
// f64 reference of the exact Q8_0 product on one shape. ----
namespace int8_lab {

const auto& kShapes = kMultiTokenShapes;
constexpr int kBf16Kernel = -1;  // "variant" of the bf16 kernel; 0.. are the int8 kernel's variants

void launch_one(int kernel, const ds::cuda::WeightView& w, const float* x, size_t n, float* y) {
  if (kernel == kBf16Kernel) {
    LAB_CHECK(ds::cuda::detail::gemm_q8_split_small(w, x, w.cols, n, y, w.rows, nullptr, true));
  } else {
    LAB_CHECK(ds::cuda::detail::gemm_q8_split_int8_variant(kernel, w, x, w.cols, n, y, w.rows, nullptr, true));
  }
}

// Max |error| of both kernels against the f64 product of a well-formed random matrix (valid fp16
// scales, activations in [-1, 1] with one 1e3 spike), relative to max |y| and to sum |w x|.
void accuracy(size_t rows, size_t cols, size_t n) {
  uint8_t* gguf = nullptr;
  LAB_CHECK(cudaMalloc(&gguf, rows * cols / 32 * 34));
  fill_q8<<<1024, 256>>>(gguf, rows * cols / 32, 11);
  std::vector<uint8_t> host(rows * cols / 32 * 34), split(host.size());
  LAB_CHECK(cudaMemcpy(host.data(), gguf, host.size(), cudaMemcpyDeviceToHost));
  ds::q8_split_rows(host.data(), rows, cols, split.data());
  LAB_CHECK(cudaMemcpy(gguf, split.data(), split.size(), cudaMemcpyHostToDevice));
  std::vector<float> wf(rows * cols), xf(n * cols);
  ds::dequantize_q8_split_rows(split.data(), rows, cols, wf.data());
  float* x = device_f32(n * cols, 12);
  LAB_CHECK(cudaMemcpy(xf.data(), x, xf.size() * sizeof(float), cudaMemcpyDeviceToHost));
  xf[3 * 32 + 5] = 1000.0f;  // an outlier channel (token 0)
  LAB_CHECK(cudaMemcpy(x, xf.data(), xf.size() * sizeof(float), cudaMemcpyHostToDevice));
  float* y = device_f32(n * rows, 13);
  const ds::cuda::WeightView w{ds::GgmlType::Q8_0_SPLIT, gguf, rows, cols, cols / 32 * 34};
  std::vector<double> exact(n * rows), abs_sum(n * rows);
  double y_max = 0;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t t = 0; t < n; ++t) {
      double s = 0, a = 0;
      for (size_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(wf[r * cols + c]) * xf[t * cols + c];
        s += p;
        a += std::fabs(p);
      }
      exact[t * rows + r] = s;
      abs_sum[t * rows + r] = a;
      y_max = std::max(y_max, std::fabs(s));
    }
  }
  for (int kernel : {kBf16Kernel, ds::cuda::detail::kSplitInt8DefaultVariant}) {
    launch_one(kernel, w, x, n, y);
    std::vector<float> got(n * rows);
    LAB_CHECK(cudaMemcpy(got.data(), y, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double err = 0, rel_sum = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = std::fabs(got[i] - exact[i]);
      err = std::max(err, e);
      rel_sum = std::max(rel_sum, e / (abs_sum[i] + 1e-30));
    }
    std::printf("gemm-int8 accuracy %zux%zu n=%zu %-5s max|err| %.3e = %.3e max|y|, max err/sum|wx| %.3e\n", rows, cols,
                n, kernel == kBf16Kernel ? "bf16" : "int8", err, err / y_max, rel_sum);
  }
  LAB_CHECK(cudaFree(gguf));
  LAB_CHECK(cudaFree(x));
  LAB_CHECK(cudaFree(y));
}

}  // namespace int8_lab

void gemm_int8(int reps) {
  using namespace int8_lab;
  const size_t ns[] = {5, 8, 16, 32, 64};
  constexpr int kVariants = ds::cuda::detail::kSplitInt8Variants;
  StepMatrices step;
  const auto& mats = step.mats;
  float *x = step.x, *y = step.y;
  const double step_bytes = step.step_bytes;
  const auto view = [&](size_t i, int copy) { return mats[i]->view(copy, ds::GgmlType::Q8_0_SPLIT); };
  for (size_t i = 0; i < mats.size(); ++i) {
    for (size_t n : ns) {
      const double bytes = static_cast<double>(kShapes[i].rows * mats[i]->row_bytes);
      const auto pct = [&](double ms) { return 100 * bytes / (ms * 1e-3) / kHbm; };
      const double bf = median_ms(reps, [&](int c) { launch_one(kBf16Kernel, view(i, c), x, n, y); });
      std::printf("gemm-int8 n=%-2zu %-24s bf16 %8.1f us %5.1f%% |", n, kShapes[i].name, bf * 1e3, pct(bf));
      for (int v = 0; v < kVariants; ++v) {
        const double ms = median_ms(reps, [&](int c) { launch_one(v, view(i, c), x, n, y); });
        std::printf(" int8 v%d %8.1f us %5.1f%% |", v, ms * 1e3, pct(ms));
      }
      std::printf(" (%d splits)\n", ds::cuda::detail::gemm_q8_split_small_splits(kShapes[i].rows, kShapes[i].cols));
    }
  }
  for (size_t n : ns) {
    const auto queued = [&](int kernel) {
      return median_ms(reps, [&](int rep) {
        int copy = rep * 7;
        for (size_t i = 0; i < mats.size(); ++i) {
          for (size_t j = 0; j < kShapes[i].per_step; ++j, ++copy) launch_one(kernel, view(i, copy), x, n, y);
        }
      });
    };
    const double bf = queued(kBf16Kernel);
    std::printf("gemm-int8 9B step n=%-2zu queued (%.2f GB)  bf16 %7.3f ms %5.1f%% |", n, step_bytes / 1e9, bf,
                100 * step_bytes / (bf * 1e-3) / kHbm);
    for (int v = 0; v < kVariants; ++v) {
      const double ms = queued(v);
      std::printf(" int8 v%d %7.3f ms %5.1f%% (x%.2f) |", v, ms, 100 * step_bytes / (ms * 1e-3) / kHbm, bf / ms);
    }
    std::printf("\n");
  }
  int8_lab::accuracy(4096, 4096, 8);
  int8_lab::accuracy(1024, 4096, 64);
}

