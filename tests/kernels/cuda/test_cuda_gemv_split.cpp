// The split-rows Q8_0 decode GEMV (kernels/cuda/gemv_q8_split.cu) against an exact (double) dot
// product and the CPU f32 reference on the same matrix in GGUF order: row counts that are not a
// multiple of the 8-row item, 1..24 column slices, every token count 1..8, padded strides, both
// dot products (float and int8x3) and activations with outliers; bitwise batch invariance (a
// token's bits do not depend on its companions or on n), rejected arguments, the matmul dispatch.
// Then the same for the small-batch bf16 tensor-core GEMM over split rows (gemm_q8_split_small,
// 1..64 tokens; its tolerances are stated above its tests), and the int8x2 activation levels of the
// tensor-core variant on the CPU.
//
// Tolerance (vs the exact product of the dequantized weights and x):
//  * rounding of the f32 operations: along any path an output sees at most 16 fma roundings (the
//    lane's 16 columns), a few for the block scale and the int8x3 combination, 5 in the lane
//    butterfly and cols/512 for the slice sum, each <= 2^-24 of a partial sum bounded by
//    sum|w x| (float dot) or sum|w| max|x_chunk| (int8x3); we allow (22 + cols/512) * 2^-23 times
//    the larger of the two (twice that count, for the partial sums' growth);
//  * the int8x3 dot also represents x to within 2^-23.3 max|x_chunk| (s3/2 with s3 =
//    max/(127*252*252)): 2^-22 * sum_i |w_i| max|x_chunk(i)| more;
//  * the tensor-core variant (int8x2 levels, kernels/cuda/int8x2_levels.h) represents x to within
//    0.506 u = 2^-15.96 max|x_block| per 32-column block (Q = rint(x * kQMax / max) with a rounded
//    reciprocal, u rounded too): 2^-15.9 * sum_i |w_i| max|x_block(i)| more. Its f32 path per
//    output: one rounding for the levels' combination, one for d * u, one per block added in its
//    lane (cols / 32 / warps, with warps = min(16, cols / 128)) and one per warp partial (<= 16):
//    within the same unit.
// Versus the CPU f32 reference: that plus the CPU's own 2e-6 * sum|w x| (test_cuda_matmul.cpp).
// The worst observed ratio is printed so the margin is on record.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/ggml_types.h"
#include "common/q8_split.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/int8x2_levels.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matmul_fast.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/cuda/split_rows_test_util.h"
#include "tools/kernel_lab/variants_lab.h"

namespace ds::cuda::test {
namespace {

// The split-rows GEMV's variants in the kernel lab's numbering (tools/kernel_lab/variants_lab.h):
// production's two (0: the dot the shape picks, 3: int8 tensor cores) and each dot forced (1, 2).
namespace lab = ::ds::kernel_lab;

std::vector<float> run_split(const SplitHost& w, const DeviceArray<uint8_t>& dw, const std::vector<float>& x, size_t xs,
                             size_t n, size_t ys, int variant = lab::kSplitAuto) {
  DeviceArray<float> dx(x), dy(n * ys);
  dy.upload(std::vector<float>(n * ys, 7.0f));  // stride padding must survive
  DS_CUDA_CHECK(lab::gemv_q8_split_variant(variant, w.device_view(dw.get()), dx.get(), xs, n, dy.get(), ys, nullptr));
  return dy.download();
}

double error_units(size_t cols) {
  return 22.0 + static_cast<double>(cols / kQ8SplitColAlign);
}

// How a variant represents the activations (the error term it adds beyond f32 rounding).
enum class Dot { kFloat, kInt8x3, kInt8x2 };
Dot dot_of_variant(int variant, size_t rows, size_t cols) {
  if (variant == lab::kSplitMma) return Dot::kInt8x2;
  return lab::gemv_q8_split_int_dot(rows, cols, variant) ? Dot::kInt8x3 : Dot::kFloat;
}
const char* dot_name(Dot d) {
  return d == Dot::kFloat ? "float" : d == Dot::kInt8x3 ? "int8x3" : "int8x2 mma";
}

// sum_i |w_i| max|x over i's chunk of `width` columns|.
double chunk_weighted(const std::vector<float>& wrow, const float* x, size_t width) {
  double sum = 0;
  for (size_t c0 = 0; c0 < wrow.size(); c0 += width) {
    double m = 0;
    for (size_t i = c0; i < c0 + width; ++i) m = std::max(m, std::fabs(static_cast<double>(x[i])));
    for (size_t i = c0; i < c0 + width; ++i) sum += std::fabs(static_cast<double>(wrow[i])) * m;
  }
  return sum;
}

// Checks every output against the exact and the CPU f32 products; returns the worst error/allowed.
double check_against_references(const SplitHost& w, const std::vector<float>& x, size_t xs, size_t n,
                                const std::vector<float>& got, size_t ys, Dot dot) {
  std::vector<float> cpu_y(n * ys, 7.0f);
  cpu::matmul(w.gguf_view(), x.data(), xs, n, cpu_y.data(), ys, nullptr);
  const double unit = error_units(w.cols) * std::ldexp(1.0, -23);
  std::vector<float> wrow(w.cols);
  double worst = 0;
  for (size_t r = 0; r < w.rows; ++r) {
    cpu::weight_row(w.gguf_view(), r, wrow.data());
    for (size_t t = 0; t < n; ++t) {
      double exact = 0, abs_sum = 0;
      for (size_t i = 0; i < w.cols; ++i) {
        const double p = static_cast<double>(wrow[i]) * x[t * xs + i];
        exact += p;
        abs_sum += std::fabs(p);
      }
      double allowed = unit * abs_sum;
      if (dot != Dot::kFloat) {
        const bool x3 = dot == Dot::kInt8x3;
        const double chunk_sum = chunk_weighted(wrow, x.data() + t * xs, x3 ? 16 : 32);
        allowed = unit * std::max(abs_sum, chunk_sum) + chunk_sum * std::exp2(x3 ? -22.0 : -15.9);
      }
      const double g = got[t * ys + r];
      const double e_exact = std::fabs(g - exact) / (allowed + 1e-30);
      const double e_cpu = std::fabs(g - cpu_y[t * ys + r]) / (allowed + 2e-6 * abs_sum + 1e-30);
      EXPECT_LE(e_exact, 1.0) << "row " << r << " token " << t << " got " << g << " exact " << exact;
      EXPECT_LE(e_cpu, 1.0) << "row " << r << " token " << t << " got " << g << " cpu " << cpu_y[t * ys + r];
      worst = std::max({worst, e_exact, e_cpu});
    }
  }
  for (size_t t = 0; t < n; ++t) {
    for (size_t p = w.rows; p < ys; ++p) EXPECT_EQ(got[t * ys + p], 7.0f) << "stride padding overwritten";
  }
  return worst;
}

struct Shape {
  size_t rows, cols;
};

TEST(CudaGemvSplit, MatchesReferencesForEveryTokenCountAndDot) {
  DS_REQUIRE_GPU();
  // 1, 2, 8, 10, 24 and 34 slices (34: the 27B ffn_down width, where the tensor-core variant has a
  // ring of 2 slots a warp); rows that are not multiples of 8; a tall matrix (many blocks).
  const Shape shapes[] = {{37, 512}, {300, 1024}, {1001, 4096}, {9, 5120}, {65, 12288}, {5000, 1024}, {40, 17408}};
  Rng rng(4243);
  for (const Shape& s : shapes) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    const size_t xs = s.cols + 4, ys = s.rows + 3;  // padded strides (x rows stay 16-byte aligned)
    const std::vector<float> x = rng.vec(8 * xs);
    for (int v : {1, 2, lab::kSplitMma}) {  // int8x3, float, int8 tensor cores
      const Dot dot = dot_of_variant(v, s.rows, s.cols);
      double worst = 0;
      for (size_t n = 1; n <= detail::kGemvSplitMaxTokens; ++n) {
        worst = std::max(worst, check_against_references(w, x, xs, n, run_split(w, dw, x, xs, n, ys, v), ys, dot));
      }
      std::printf("gemv_split %zux%zu %s: worst error / allowed = %.3g\n", s.rows, s.cols, dot_name(dot), worst);
    }
  }
}

// Real activations have outlier channels: a chunk's max sets the int8x3 grid, so small values next
// to a huge one carry relatively more error; the bound above accounts for it, and so must the kernel.
TEST(CudaGemvSplit, IntegerDotsHandleOutliersAndZeroChunks) {
  DS_REQUIRE_GPU();
  Rng rng(5151);
  const SplitHost w = make_split(257, 2048, rng);
  DeviceArray<uint8_t> dw(w.split);
  std::vector<float> x = rng.vec(2 * 2048);
  for (size_t i = 0; i < x.size(); i += 37) x[i] *= 3000.0f;       // outliers
  for (size_t i = 512; i < 1024; ++i) x[i] = 0.0f;                 // an all-zero slice (token 0)
  for (size_t i = 2048 + 100; i < 2048 + 116; ++i) x[i] = 1e-30f;  // a tiny chunk (token 1)
  for (int v : {1, lab::kSplitMma}) {
    const Dot dot = dot_of_variant(v, 257, 2048);
    const double worst = check_against_references(w, x, 2048, 2, run_split(w, dw, x, 2048, 2, 257, v), 257, dot);
    std::printf("gemv_split %s with outliers: worst error / allowed = %.3g\n", dot_name(dot), worst);
  }
  // A non-finite activation must not give a finite answer, nor spill into another token's rows.
  x[5] = std::numeric_limits<float>::infinity();
  for (int v : {1, lab::kSplitMma}) {
    const std::vector<float> bad = run_split(w, dw, x, 2048, 2, 257, v);
    for (size_t r = 0; r < 257; ++r) {
      EXPECT_FALSE(std::isfinite(bad[r])) << "variant " << v << " row " << r;
      EXPECT_TRUE(std::isfinite(bad[257 + r])) << "variant " << v << " row " << r << " of the finite token";
    }
  }
}

// A row's bits must not depend on which other tokens share the call, nor on n; variant 0 is
// exactly the dot its geometry rule picks.
TEST(CudaGemvSplit, BatchInvariantBitwise) {
  DS_REQUIRE_GPU();
  Rng rng(78);
  for (const Shape& s : {Shape{300, 1024}, Shape{4096, 4096}, Shape{40000, 1024}, Shape{100, 17408}}) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    const std::vector<float> x = rng.vec(8 * s.cols);
    std::vector<float> by_variant[lab::kSplitVariants];
    for (int v = 0; v < lab::kSplitVariants; ++v) {
      const std::vector<float> all = run_split(w, dw, x, s.cols, 8, s.rows, v);
      for (size_t j = 0; j < 8; ++j) {
        const std::vector<float> xj(x.begin() + j * s.cols, x.begin() + (j + 1) * s.cols);
        const std::vector<float> alone = run_split(w, dw, xj, s.cols, 1, s.rows, v);
        ASSERT_EQ(std::memcmp(alone.data(), all.data() + j * s.rows, s.rows * sizeof(float)), 0)
            << s.rows << "x" << s.cols << " variant " << v << " token " << j << " alone differs from its 8-token row";
      }
      const std::vector<float> x3(x.begin() + 2 * s.cols, x.begin() + 5 * s.cols);
      const std::vector<float> three = run_split(w, dw, x3, s.cols, 3, s.rows, v);
      ASSERT_EQ(std::memcmp(three.data(), all.data() + 2 * s.rows, 3 * s.rows * sizeof(float)), 0) << "variant " << v;
      by_variant[v] = all;
    }
    const int picked = lab::gemv_q8_split_int_dot(s.rows, s.cols, 0) ? 1 : 2;
    EXPECT_EQ(std::memcmp(by_variant[0].data(), by_variant[picked].data(), by_variant[0].size() * sizeof(float)), 0)
        << s.rows << "x" << s.cols;
  }
}

// As a programmatic dependent launch the kernel may start during the previous kernel; it must still
// read the activations that kernel wrote: a producer kernel (add_inplace writing x = 0 + x right
// before) followed by the dependent GEMV gives the bits of the ordinary launch.
TEST(CudaGemvSplit, DependentLaunchGivesTheSameBits) {
  DS_REQUIRE_GPU();
  Rng rng(91);
  const SplitHost w = make_split(4096, 4096, rng);
  DeviceArray<uint8_t> dw(w.split);
  const std::vector<float> x = rng.vec(4 * 4096);
  for (int v : {lab::kSplitAuto, lab::kSplitMma}) {
    for (size_t n : {size_t{1}, size_t{4}}) {
      const std::vector<float> want = run_split(w, dw, x, 4096, n, 4096, v);
      DeviceArray<float> src(x), dx(x.size()), dy(n * 4096);
      for (int rep = 0; rep < 3; ++rep) {
        DS_CUDA_CHECK(cudaMemset(dy.get(), 0, n * 4096 * sizeof(float)));
        DS_CUDA_CHECK(cudaMemset(dx.get(), 0, x.size() * sizeof(float)));
        DS_CUDA_CHECK(add_inplace(dx.get(), src.get(), x.size(), nullptr));  // the producer kernel
        DS_CUDA_CHECK(lab::gemv_q8_split_variant(v, w.device_view(dw.get()), dx.get(), 4096, n, dy.get(), 4096, nullptr,
                                                 /*pdl=*/true));
        const std::vector<float> got = dy.download();
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "variant " << v << " n=" << n << " rep " << rep;
      }
    }
  }
}

// The FFN's SwiGLU folded into the GEMV's activation loads gives the bits of swiglu then the GEMV,
// for both dot products and every launch width; matmul_swiglu_decode takes only decode steps.
TEST(CudaGemvSplit, SwigluFoldedGivesTheBitsOfSwigluThenGemv) {
  DS_REQUIRE_GPU();
  Rng rng(93);
  for (const Shape& s : {Shape{1040, 12288}, Shape{300, 4096}}) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    const std::vector<float> gate = rng.vec(4 * s.cols), up = rng.vec(4 * s.cols);
    DeviceArray<float> dgate(gate), dup(up), dact(4 * s.cols), dy(4 * s.rows);
    DS_CUDA_CHECK(swiglu(dgate.get(), dup.get(), 4 * s.cols, dact.get(), nullptr));
    for (int v = 0; v < lab::kSplitVariants; ++v) {
      for (size_t n = 1; n <= 4; ++n) {
        DS_CUDA_CHECK(
            lab::gemv_q8_split_variant(v, w.device_view(dw.get()), dact.get(), s.cols, n, dy.get(), s.rows, nullptr));
        const std::vector<float> want = dy.download();
        DS_CUDA_CHECK(cudaMemset(dy.get(), 0, 4 * s.rows * sizeof(float)));
        DS_CUDA_CHECK(lab::gemv_q8_split_swiglu_variant(v, w.device_view(dw.get()), dgate.get(), dup.get(), s.cols, n,
                                                        dy.get(), s.rows, nullptr, /*pdl=*/n % 2 == 0));
        const std::vector<float> got = dy.download();
        EXPECT_EQ(std::memcmp(got.data(), want.data(), n * s.rows * sizeof(float)), 0)
            << s.rows << "x" << s.cols << " variant " << v << " n=" << n;
      }
    }
    const cpu::WeightView dev = w.device_view(dw.get());
    EXPECT_EQ(matmul_swiglu_decode(dev, dgate.get(), dup.get(), s.cols, 1, dy.get(), s.rows, TcGemmOptions{}, nullptr),
              cudaSuccess);
    EXPECT_EQ(matmul_swiglu_decode(dev, dgate.get(), dup.get(), s.cols, 5, dy.get(), s.rows, TcGemmOptions{}, nullptr),
              cudaErrorNotSupported)
        << "5+ tokens are not a decode GEMV step";
    EXPECT_EQ(matmul_swiglu_decode(dev, dgate.get(), nullptr, s.cols, 1, dy.get(), s.rows, TcGemmOptions{}, nullptr),
              cudaErrorNotSupported);
    EXPECT_EQ(detail::gemv_q8_split_swiglu(dev, dgate.get(), dup.get() + 1, s.cols, 1, dy.get(), s.rows, nullptr),
              cudaErrorInvalidValue)
        << "misaligned up rows";
  }
}

// The tensor-core GEMV with its activations quantized once by their own launch (act_scratch; the
// verify rows' down projection) gives the bits of the GEMV quantizing them itself: plain and SwiGLU
// inputs, 1..8 tokens (8: two launches reusing the scratch), dependent launches, outliers, an
// all-zero block and a non-finite token (which must stay non-finite and in its own rows).
TEST(CudaGemvSplit, MmaActivationsQuantizedOnceGiveTheSameBits) {
  DS_REQUIRE_GPU();
  Rng rng(97);
  for (const Shape& s : {Shape{1040, 12288}, Shape{300, 4096}, Shape{100, 17408}}) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    std::vector<float> gate = rng.vec(8 * s.cols);
    const std::vector<float> up = rng.vec(8 * s.cols);
    for (size_t i = 0; i < gate.size(); i += 41) gate[i] *= 2000.0f;  // outliers
    for (size_t i = 64; i < 96; ++i) gate[i] = 0.0f;                  // a zero block (token 0)
    gate[3 * s.cols + 7] = std::numeric_limits<float>::quiet_NaN();   // token 3 not finite
    DeviceArray<float> dgate(gate), dup(up), dy(8 * s.rows);
    DeviceArray<uint8_t> acts(detail::gemv_q8_split_mma_act_bytes(s.cols));
    const cpu::WeightView dev = w.device_view(dw.get());
    const RowSegments out = RowSegments::whole(dy.get(), s.rows, s.rows);
    for (const float* upp : {static_cast<const float*>(nullptr), static_cast<const float*>(dup.get())}) {
      for (size_t n = 1; n <= 8; ++n) {
        DS_CUDA_CHECK(detail::gemv_q8_split_mma(dev, dgate.get(), upp, s.cols, n, out, nullptr, false));
        const std::vector<float> want = dy.download();
        DS_CUDA_CHECK(cudaMemset(dy.get(), 0, 8 * s.rows * sizeof(float)));
        const bool pdl = n % 2 == 0;
        DS_CUDA_CHECK(detail::gemv_q8_split_mma(dev, dgate.get(), upp, s.cols, n, out, nullptr, pdl, acts.get()));
        const std::vector<float> got = dy.download();
        const char* what = upp == nullptr ? "plain" : "swiglu";
        EXPECT_EQ(std::memcmp(got.data(), want.data(), n * s.rows * sizeof(float)), 0)
            << s.rows << "x" << s.cols << " " << what << " n=" << n;
        for (size_t t = 0; t < n; ++t) {
          EXPECT_EQ(std::isfinite(got[t * s.rows]), t != 3) << what << " n=" << n << " token " << t;
        }
      }
    }
    TcGemmOptions tc;
    tc.split_gemv_mma = true;
    DS_CUDA_CHECK(matmul_swiglu_decode(dev, dgate.get(), dup.get(), s.cols, 3, dy.get(), s.rows, tc, nullptr));
    const std::vector<float> want = dy.download();
    DS_CUDA_CHECK(
        matmul_swiglu_decode(dev, dgate.get(), dup.get(), s.cols, 3, dy.get(), s.rows, tc, nullptr, acts.get()));
    EXPECT_EQ(std::memcmp(dy.download().data(), want.data(), 3 * s.rows * sizeof(float)), 0) << "matmul_swiglu_decode";
    EXPECT_EQ(detail::gemv_q8_split_mma(dev, dgate.get(), nullptr, s.cols, 1, out, nullptr, false, acts.get() + 8),
              cudaErrorMisalignedAddress);
  }
}

// The GEMV of a stacked matrix to row segments (speculative verify rows over [q;k;v] etc.): every
// row's bits are the whole product's at 1..4 tokens and across launches (8 tokens: two), with the
// int8x3 (1024 columns) and the float dot (7168 columns: 14 slices); bad segment lists refused.
TEST(CudaGemvSplit, RowSegmentsEqualTheWholeProduct) {
  DS_REQUIRE_GPU();
  expect_row_segments_equal_whole(
      {{4096 + 1024 + 64, 1024}, {700, 7168}},
      [](const SplitHost& w, const DeviceArray<uint8_t>& dw, const std::vector<float>& x, size_t n) {
        return run_split(w, dw, x, w.cols, n, w.rows);
      },
      [](const cpu::WeightView& w, const float* x, size_t xs, size_t n, const RowSegments& out, bool dependent) {
        return detail::gemv_q8_split_rows(w, x, xs, n, out, nullptr, dependent);
      },
      {1, 2, 3, 4, 8});
  // The tensor-core variant, at widths with a ring of 4 slots per warp (4096) and of 3 (12288).
  expect_row_segments_equal_whole(
      {{4096 + 1024 + 64, 4096}, {700, 12288}},
      [](const SplitHost& w, const DeviceArray<uint8_t>& dw, const std::vector<float>& x, size_t n) {
        return run_split(w, dw, x, w.cols, n, w.rows, lab::kSplitMma);
      },
      [](const cpu::WeightView& w, const float* x, size_t xs, size_t n, const RowSegments& out, bool dependent) {
        return lab::gemv_q8_split_rows_variant(lab::kSplitMma, w, x, xs, n, out, nullptr, dependent);
      },
      {1, 3, 4, 7});
}

TEST(CudaGemvSplit, RejectsWhatItCannotRead) {
  DS_REQUIRE_GPU();
  DeviceArray<uint8_t> dw(64 * 1088 + 64);
  DeviceArray<float> dx(9 * 1024 + 8), dy(9 * 64);
  const cpu::WeightView ok{GgmlType::Q8_0_SPLIT, dw.get(), 64, 1024, 1088};
  EXPECT_TRUE(detail::gemv_q8_split_applies(ok, dx.get(), 1024, 8));
  EXPECT_FALSE(detail::gemv_q8_split_applies(ok, dx.get(), 1024, 9));  // too many tokens
  EXPECT_FALSE(detail::gemv_q8_split_applies(ok, dx.get(), 1024, 0));
  cpu::WeightView gguf = ok;
  gguf.type = GgmlType::Q8_0;  // GGUF order is another kernel's job
  EXPECT_FALSE(detail::gemv_q8_split_applies(gguf, dx.get(), 1024, 1));
  cpu::WeightView narrow{GgmlType::Q8_0_SPLIT, dw.get(), 64, 256, 272};  // not a multiple of 512 columns
  EXPECT_FALSE(detail::gemv_q8_split_applies(narrow, dx.get(), 256, 1));
  cpu::WeightView padded = ok;
  padded.row_bytes = 1104;  // not the packed row
  EXPECT_FALSE(detail::gemv_q8_split_applies(padded, dx.get(), 1024, 1));
  cpu::WeightView shifted = ok;
  shifted.data = dw.get() + 8;
  EXPECT_FALSE(detail::gemv_q8_split_applies(shifted, dx.get(), 1024, 1));
  EXPECT_FALSE(detail::gemv_q8_split_applies(ok, dx.get() + 1, 1024, 1));  // x not 16-byte aligned
  EXPECT_FALSE(detail::gemv_q8_split_applies(ok, dx.get(), 1025, 2));      // token rows not 16-byte aligned
  EXPECT_EQ(detail::gemv_q8_split(ok, dx.get(), 1024, 9, dy.get(), 64, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(lab::gemv_q8_split_variant(lab::kSplitVariants, ok, dx.get(), 1024, 1, dy.get(), 64, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(detail::gemv_q8_split_variant(detail::kGemvSplitVariants, ok, dx.get(), 1024, 1, dy.get(), 64, nullptr),
            cudaErrorInvalidValue);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
}

// cuda::matmul takes the split GEMV for 1..8 tokens (same bits as calling it directly), with the
// small-batch GEMM (5..64 tokens in bf16 mode) switched off.
TEST(CudaGemvSplit, MatmulDispatchUsesIt) {
  DS_REQUIRE_GPU();
  Rng rng(9);
  const SplitHost w = make_split(200, 2048, rng);
  DeviceArray<uint8_t> dw(w.split);
  const std::vector<float> x = rng.vec(8 * 2048);
  DeviceArray<float> dx(x);
  for (size_t n : {size_t{1}, size_t{4}, size_t{8}}) {
    const std::vector<float> want = run_split(w, dw, x, 2048, n, 200);
    DeviceArray<float> dy(n * 200);
    DS_CUDA_CHECK(matmul(w.device_view(dw.get()), dx.get(), 2048, n, dy.get(), 200, MatmulPrecision::kBf16TensorCores,
                         TcGemmOptions{.split_small = false}, nullptr));
    const std::vector<float> got = dy.download();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "n=" << n;
  }
}

// ---- gemm_q8_split_small: small batches (1..64 tokens) on bf16 tensor cores over split rows ----
//
// Its operands are bf16(d * q) and bf16(x), exactly those of the prefill GEMM. Tolerances:
//  * versus the exact (double) product of those bf16 operands: only the f32 accumulation errs. One
//    mma adds 16 exact products to its accumulator with at most ~17 roundings of 2^-24 relative to
//    the running sum (<= S = sum|wb xb|); a split runs cols/16 mmas, and the splits are added in
//    order (<= 16 more roundings): we allow (cols/16 + 16) * 17 * 2^-24 * S. (Typical errors are a
//    random walk, far smaller; the worst observed ratio is printed.)
//  * versus the exact product of the unrounded weights and activations (what the CPU computes):
//    the two bf16 roundings add <= 2 * 2^-9 * sum|w x| (each operand is within 2^-9 relative).
std::vector<float> run_small(const SplitHost& w, const DeviceArray<uint8_t>& dw, const std::vector<float>& x, size_t xs,
                             size_t n, size_t ys) {
  DeviceArray<float> dx(x), dy(n * ys);
  dy.upload(std::vector<float>(n * ys, 7.0f));  // stride padding must survive
  DS_CUDA_CHECK(detail::gemm_q8_split_small(w.device_view(dw.get()), dx.get(), xs, n, dy.get(), ys, nullptr));
  return dy.download();
}

float round_bf16(float v) {
  return bf16_to_fp32(fp32_to_bf16(v));
}

double check_small(const SplitHost& w, const std::vector<float>& x, size_t xs, size_t n, const std::vector<float>& got,
                   size_t ys) {
  std::vector<float> wrow(w.cols);
  const double acc_units = (static_cast<double>(w.cols) / 16 + 16) * 17 * std::ldexp(1.0, -24);
  double worst = 0;
  for (size_t r = 0; r < w.rows; ++r) {
    cpu::weight_row(w.gguf_view(), r, wrow.data());
    for (size_t t = 0; t < n; ++t) {
      double exact_b = 0, abs_b = 0, exact = 0, abs_sum = 0;
      for (size_t i = 0; i < w.cols; ++i) {
        const double pb = static_cast<double>(round_bf16(wrow[i])) * round_bf16(x[t * xs + i]);
        const double p = static_cast<double>(wrow[i]) * x[t * xs + i];
        exact_b += pb;
        abs_b += std::fabs(pb);
        exact += p;
        abs_sum += std::fabs(p);
      }
      const double g = got[t * ys + r];
      const double e_b = std::fabs(g - exact_b) / (acc_units * abs_b + 1e-30);
      const double e = std::fabs(g - exact) / (acc_units * abs_b + std::ldexp(abs_sum, -8) + 1e-30);
      EXPECT_LE(e_b, 1.0) << "row " << r << " token " << t << " got " << g << " bf16-operand product " << exact_b;
      EXPECT_LE(e, 1.0) << "row " << r << " token " << t << " got " << g << " exact " << exact;
      worst = std::max(worst, e_b);
    }
  }
  for (size_t t = 0; t < n; ++t) {
    for (size_t p = w.rows; p < ys; ++p) EXPECT_EQ(got[t * ys + p], 7.0f) << "stride padding overwritten";
  }
  return worst;
}

// Shapes: rows that are not multiples of the 256-row block or the 32-row warp; 1 to 48 K units of
// 256 columns, so both one split and several (partials summed by the reduce kernel) run; every
// tile count 1..8 with partial tiles.
TEST(CudaGemmSplitSmall, MatchesReferencesForEveryTileCount) {
  DS_REQUIRE_GPU();
  const Shape shapes[] = {{37, 512}, {300, 1024}, {1001, 4096}, {9, 12288}, {4096, 4096}, {5000, 512}};
  Rng rng(6262);
  for (const Shape& s : shapes) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    const size_t xs = s.cols + 4, ys = s.rows + 3;
    const std::vector<float> x = rng.vec(detail::kSplitSmallMaxTokens * xs);
    double worst = 0;
    for (size_t n : {1, 5, 8, 9, 17, 24, 33, 47, 56, 64}) {
      worst = std::max(worst, check_small(w, x, xs, n, run_small(w, dw, x, xs, n, ys), ys));
    }
    std::printf("gemm_split_small %zux%zu (%d splits): worst error / allowed = %.3g\n", s.rows, s.cols,
                detail::gemm_q8_split_small_splits(s.rows, s.cols), worst);
  }
}

// A token's bits must not depend on the other tokens of the call or on n (the K split is a function
// of the shape alone), and a non-finite activation must not give a finite answer.
TEST(CudaGemmSplitSmall, BatchInvariantBitwiseAndNonFinite) {
  DS_REQUIRE_GPU();
  Rng rng(818);
  for (const Shape& s : {Shape{300, 1024}, Shape{4096, 4096}, Shape{1024, 12288}}) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    const std::vector<float> x = rng.vec(64 * s.cols);
    const std::vector<float> all = run_small(w, dw, x, s.cols, 64, s.rows);
    for (size_t j : {0, 9, 31, 63}) {
      const std::vector<float> xj(x.begin() + j * s.cols, x.begin() + (j + 1) * s.cols);
      const std::vector<float> alone = run_small(w, dw, xj, s.cols, 1, s.rows);
      ASSERT_EQ(std::memcmp(alone.data(), all.data() + j * s.rows, s.rows * sizeof(float)), 0)
          << s.rows << "x" << s.cols << " token " << j << " alone differs from its 64-token row";
    }
    const std::vector<float> x7(x.begin() + 20 * s.cols, x.begin() + 27 * s.cols);
    const std::vector<float> seven = run_small(w, dw, x7, s.cols, 7, s.rows);
    ASSERT_EQ(std::memcmp(seven.data(), all.data() + 20 * s.rows, 7 * s.rows * sizeof(float)), 0) << s.rows;
    // The launch variants differ in occupancy only: the same bits.
    for (size_t n : {size_t{3}, size_t{32}}) {
      DeviceArray<float> dx(x), dy(n * s.rows);
      DS_CUDA_CHECK(
          lab::gemm_q8_split_small_variant(1, w.device_view(dw.get()), dx.get(), s.cols, n, dy.get(), s.rows, nullptr));
      const std::vector<float> v1 = dy.download();
      EXPECT_EQ(std::memcmp(v1.data(), all.data(), v1.size() * sizeof(float)), 0) << s.rows << " n=" << n;
    }
  }
  const SplitHost w = make_split(64, 512, rng);
  DeviceArray<uint8_t> dw(w.split);
  std::vector<float> x = rng.vec(2 * 512);
  x[512 + 5] = std::numeric_limits<float>::infinity();
  const std::vector<float> got = run_small(w, dw, x, 512, 2, 64);
  for (size_t r = 0; r < 64; ++r) {
    EXPECT_TRUE(std::isfinite(got[r])) << "token 0 row " << r << " polluted by token 1";
    EXPECT_FALSE(std::isfinite(got[64 + r])) << "row " << r;
  }
}

// As dependent launches (weights loaded before the previous kernel finished) the kernels must still
// read the activations that kernel wrote: a producer (add_inplace writing x) right before gives the
// bits of ordinary launches, for both variants and with and without a K split.
TEST(CudaGemmSplitSmall, DependentLaunchGivesTheSameBits) {
  DS_REQUIRE_GPU();
  Rng rng(92);
  for (const Shape& s : {Shape{4096, 4096}, Shape{70000, 512}}) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    const std::vector<float> x = rng.vec(24 * s.cols);
    const std::vector<float> want = run_small(w, dw, x, s.cols, 24, s.rows);
    DeviceArray<float> src(x), dx(x.size()), dy(24 * s.rows);
    for (int variant = 0; variant < lab::kSplitSmallVariants; ++variant) {
      DS_CUDA_CHECK(cudaMemset(dy.get(), 0, 24 * s.rows * sizeof(float)));
      DS_CUDA_CHECK(cudaMemset(dx.get(), 0, x.size() * sizeof(float)));
      DS_CUDA_CHECK(add_inplace(dx.get(), src.get(), x.size(), nullptr));  // the producer kernel
      DS_CUDA_CHECK(lab::gemm_q8_split_small_variant(variant, w.device_view(dw.get()), dx.get(), s.cols, 24, dy.get(),
                                                     s.rows, nullptr, /*dependent=*/true));
      const std::vector<float> got = dy.download();
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << s.rows << "x" << s.cols << " variant " << variant << " ("
          << detail::gemm_q8_split_small_splits(s.rows, s.cols) << " splits)";
    }
  }
}

// A stacked matrix's product written to row segments in one pass equals the whole product's rows
// (bitwise: same kernel, same K split), with and without a K split; bad segment lists are refused.
TEST(CudaGemmSplitSmall, RowSegmentsEqualTheWholeProduct) {
  DS_REQUIRE_GPU();
  expect_row_segments_equal_whole(
      {{4096 + 1024 + 64, 1024}, {70000, 512}},
      [](const SplitHost& w, const DeviceArray<uint8_t>& dw, const std::vector<float>& x, size_t n) {
        return run_small(w, dw, x, w.cols, n, w.rows);
      },
      [](const cpu::WeightView& w, const float* x, size_t xs, size_t n, const RowSegments& out, bool dependent) {
        return detail::gemm_q8_split_small_rows(w, x, xs, n, out, nullptr, dependent);
      });
}

TEST(CudaGemmSplitSmall, RejectsWhatItCannotRead) {
  DS_REQUIRE_GPU();
  DeviceArray<uint8_t> dw(64 * 1088 + 64);
  DeviceArray<float> dx(65 * 1024 + 8), dy(65 * 64);
  const cpu::WeightView ok{GgmlType::Q8_0_SPLIT, dw.get(), 64, 1024, 1088};
  EXPECT_TRUE(detail::gemm_q8_split_small_applies(ok, dx.get(), 1024, dy.get(), 64, 64));
  EXPECT_FALSE(detail::gemm_q8_split_small_applies(ok, dx.get(), 1024, dy.get(), 64, 65));  // too many tokens
  EXPECT_FALSE(detail::gemm_q8_split_small_applies(ok, dx.get(), 1024, dy.get(), 64, 0));
  EXPECT_FALSE(detail::gemm_q8_split_small_applies(ok, dx.get(), 1000, dy.get(), 64, 2));  // x rows overlap
  EXPECT_FALSE(detail::gemm_q8_split_small_applies(ok, dx.get(), 1024, dy.get(), 63, 2));  // y rows overlap
  cpu::WeightView gguf = ok;
  gguf.type = GgmlType::Q8_0;
  EXPECT_EQ(detail::gemm_q8_split_small(gguf, dx.get(), 1024, 8, dy.get(), 64, nullptr), cudaErrorNotSupported);
  cpu::WeightView narrow{GgmlType::Q8_0_SPLIT, dw.get(), 64, 160, 170};  // not whole 256-column units
  EXPECT_FALSE(detail::gemm_q8_split_small_applies(narrow, dx.get(), 160, dy.get(), 64, 8));
  cpu::WeightView shifted = ok;
  shifted.data = dw.get() + 8;
  EXPECT_FALSE(detail::gemm_q8_split_small_applies(shifted, dx.get(), 1024, dy.get(), 64, 8));
  EXPECT_EQ(detail::gemm_q8_split_small(ok, dx.get(), 1024, 65, dy.get(), 64, nullptr), cudaErrorInvalidValue);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
}

// cuda::matmul takes it for 5..64 tokens in the bf16 mode (the same bits as calling it
// directly), the split GEMV up to 4, and never in the f32 mode.
TEST(CudaGemmSplitSmall, MatmulDispatch) {
  DS_REQUIRE_GPU();
  Rng rng(19);
  const SplitHost w = make_split(200, 2048, rng);
  DeviceArray<uint8_t> dw(w.split);
  const std::vector<float> x = rng.vec(64 * 2048);
  DeviceArray<float> dx(x);
  const TcGemmOptions tc;  // the production options: the small-batch GEMM on
  const auto via_matmul = [&](size_t n, MatmulPrecision p) {
    DeviceArray<float> dy(n * 200);
    DS_CUDA_CHECK(matmul(w.device_view(dw.get()), dx.get(), 2048, n, dy.get(), 200, p, tc, nullptr));
    return dy.download();
  };
  for (size_t n : {size_t{5}, size_t{16}, size_t{64}}) {
    const std::vector<float> want = run_small(w, dw, x, 2048, n, 200);
    const std::vector<float> got = via_matmul(n, MatmulPrecision::kBf16TensorCores);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "n=" << n;
    const std::vector<float> f32 = via_matmul(n, MatmulPrecision::kF32);
    EXPECT_NE(std::memcmp(f32.data(), want.data(), f32.size() * sizeof(float)), 0) << "n=" << n << " in f32 mode";
  }
  const std::vector<float> four = via_matmul(4, MatmulPrecision::kBf16TensorCores);
  const std::vector<float> gemv = run_split(w, dw, x, 2048, 4, 200);
  EXPECT_EQ(std::memcmp(four.data(), gemv.data(), four.size() * sizeof(float)), 0);
}

// The int8x2 activation representation of the tensor-core variant (kernels/cuda/int8x2_levels.h,
// its CPU functions) within its proven bound |x - u Q| <= 2^-15.98 max|x_block| + 2^-134; we use
// kInt8x2QuantRel * m + kInt8x2QuantAbs.
constexpr double kInt8x2QuantRel = 1.5501e-5;          // 0.502 / 32385 (1 + 2^-24), rounded up
const double kInt8x2QuantAbs = std::ldexp(1.0, -130);  // the subnormal-scale slack, rounded up

// The activation representation on the CPU (no GPU needed): levels in range and x ~= u (254 a + b)
// within the proven bound, for random blocks, blocks at the rounding ties and the range's ends,
// subnormal scales, huge values.
TEST(Int8x2Levels, MeetTheirBoundOnTheCpu) {
  Rng rng(4242);
  const size_t cols = 32 * 64;
  std::vector<float> x = rng.vec(cols);
  for (size_t i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 15.5f;                 // Q ties: +-0.5 steps
  for (size_t i = 32; i < 64; ++i) x[i] = (i % 2 ? 1.0f : -1.0f) * (1.0f + i * 1e-7f);  // near the max
  for (size_t i = 64; i < 96; ++i) x[i] *= 1e-37f;                                      // subnormal u
  for (size_t i = 96; i < 128; ++i) x[i] *= 1e-44f;                                     // u rounds to 0
  for (size_t i = 128; i < 160; ++i) x[i] *= 3.0e38f;                                   // huge
  for (size_t i = 160; i < 192; ++i) x[i] = 0.0f;                                       // all zero
  for (size_t i = 192; i < 224; ++i) x[i] = (i == 200 ? 1000.0f : x[i]);                // an outlier
  for (size_t blk = 8; blk < cols / 32; ++blk) {                                        // spread magnitudes
    const float scale = std::ldexp(1.0f, static_cast<int>(blk % 40) - 20);
    for (size_t i = 0; i < 32; ++i) x[blk * 32 + i] *= scale;
  }
  std::vector<int8_t> levels(2 * cols);
  std::vector<float> u(cols / 32);
  int8x2::reference_levels(x.data(), cols, 1, cols, levels.data(), u.data());
  double worst = 0;
  for (size_t blk = 0; blk < cols / 32; ++blk) {
    double m = 0;
    for (size_t i = 0; i < 32; ++i) m = std::max(m, std::fabs(static_cast<double>(x[blk * 32 + i])));
    for (size_t i = 0; i < 32; ++i) {
      const size_t c = blk * 32 + i;
      const int a = levels[c], b = levels[cols + c];
      ASSERT_TRUE(a >= -127 && a <= 127 && b >= -127 && b <= 127) << "column " << c << ": " << a << " " << b;
      const double err = std::fabs(static_cast<double>(u[blk]) * (254.0 * a + b) - x[c]);
      const double ratio = err / (kInt8x2QuantRel * m + kInt8x2QuantAbs);
      EXPECT_LE(ratio, 1.0) << "column " << c << " x " << x[c];
      if (m > 1e-30) worst = std::max(worst, ratio);
    }
  }
  std::printf("int8x2 levels (CPU): worst error / allowed = %.3g (normal blocks)\n", worst);
  // Every Q in range splits into levels that give it back.
  for (int q = -int8x2::kQMax; q <= int8x2::kQMax; ++q) {
    int8_t a, b;
    int8x2::split_levels(q, a, b);
    ASSERT_TRUE(a >= -127 && b >= -127 && 254 * a + b == q) << q;
  }
}

}  // namespace
}  // namespace ds::cuda::test
