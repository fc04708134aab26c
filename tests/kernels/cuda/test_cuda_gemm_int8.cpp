// The small-batch Q8_0 GEMM over split rows on int8 tensor cores (kernels/cuda/gemm_q8_split_int8.cu)
// and its activation pre-pass, against a double-precision reference of the exact Q8_0 product:
// 1..64 tokens, row counts that are not multiples of the 256-row block, with and without a K split,
// activations with outliers, all-zero, tiny and subnormal-scale blocks; bitwise batch invariance,
// launch variants and row segments; dependent launches; rejected arguments.
//
// Tolerance of the product (the derivation is in gemm_q8_split_int8.cu's header comment):
//  * activation quantization: each x_i is represented as x^_i with |x_i - x^_i| <= e_i =
//    2^-15.98 m(i) + 2^-134 (m(i): max |x| of x_i's 32-column block): sum_i |w_i| e_i in all; we
//    use 1.5501e-5 m(i) + 2^-130;
//  * f32 arithmetic: each block's term d u (254 ca + cb) (exact int32 dots) takes two roundings
//    (2^-23 of the block's sum |w x^|), each of the <= cols/32 block additions and the <= 16 split
//    additions one of 2^-24 relative to a partial sum <= S^ = sum |w x^| <= sum |w x| + the above:
//    (cols/32 + 20) * 2^-24 * S^.
// The worst observed error / allowed ratio is printed so the margin is on record.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "common/ggml_types.h"
#include "common/q8_split.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/int8x2_levels.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matmul_fast.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/cuda/split_rows_test_util.h"

namespace ds::cuda::test {
namespace {

constexpr double kQuantRel = 1.5501e-5;               // 0.502 / 32385 (1 + 2^-24), rounded up
const double kQuantAbs = std::ldexp(1.0, -130);       // the subnormal-scale slack, rounded up
constexpr size_t kMaxTokens = detail::kSplitSmallMaxTokens;

// Random activations for kMaxTokens tokens with the awkward blocks real ones have: a 1e3 spike in
// one block, an all-zero block, a tiny block (1e-30) and one whose scale is subnormal (1e-37).
std::vector<float> make_x(size_t cols, size_t xs, Rng& rng) {
  std::vector<float> x = rng.vec(kMaxTokens * xs);
  float* p = x.data();
  if (p == nullptr || cols < 256) return x;  // (never: the shapes have 512+ columns)
  p[0 * xs + 3 * 32 + 7] = 1000.0f;
  for (size_t i = 5 * 32; i < 6 * 32; ++i) p[1 * xs + i] = 0.0f;
  for (size_t i = 2 * 32; i < 3 * 32; ++i) p[2 * xs + i] *= 1e-30f;
  for (size_t i = (cols / 32 - 1) * 32; i < cols; ++i) p[3 * xs + i] *= 1e-37f;
  for (size_t t = 4; t < kMaxTokens; t += 9) p[t * xs + (t * 37) % cols] = -1000.0f;  // more spikes
  return x;
}

std::vector<float> run_int8(const SplitHost& w, const DeviceArray<uint8_t>& dw, const std::vector<float>& x, size_t xs,
                            size_t n, size_t ys, int variant = detail::kSplitInt8DefaultVariant) {
  DeviceArray<float> dx(x), dy(n * ys);
  dy.upload(std::vector<float>(n * ys, 7.0f));  // stride padding must survive
  DS_CUDA_CHECK(detail::gemm_q8_split_int8_variant(variant, w.device_view(dw.get()), dx.get(), xs, n, dy.get(), ys,
                                                   nullptr));
  return dy.download();
}

// The exact product (double) of rows r (every `row_step`-th and the last 300) for every token, and
// the allowed error of each.
struct Reference {
  std::vector<size_t> rows;
  std::vector<double> exact, allowed;  // [row index][token]
};

Reference reference(const SplitHost& w, const std::vector<float>& x, size_t xs, size_t row_step) {
  Reference ref;
  for (size_t r = 0; r < w.rows; ++r) {
    if (r % row_step == 0 || r + 300 >= w.rows) ref.rows.push_back(r);
  }
  std::vector<double> block_max(kMaxTokens * w.cols / 32, 0.0);
  for (size_t t = 0; t < kMaxTokens; ++t) {
    for (size_t i = 0; i < w.cols; ++i) {
      double& m = block_max[t * (w.cols / 32) + i / 32];
      m = std::max(m, std::fabs(static_cast<double>(x[t * xs + i])));
    }
  }
  const double acc_units = (static_cast<double>(w.cols) / 32 + 20) * std::ldexp(1.0, -24);
  std::vector<float> wrow(w.cols);
  for (size_t r : ref.rows) {
    cpu::weight_row(w.gguf_view(), r, wrow.data());
    for (size_t t = 0; t < kMaxTokens; ++t) {
      double exact = 0, abs_sum = 0, quant = 0;
      for (size_t i = 0; i < w.cols; ++i) {
        const double wi = wrow[i], xi = x[t * xs + i];
        exact += wi * xi;
        abs_sum += std::fabs(wi * xi);
        quant += std::fabs(wi) * (kQuantRel * block_max[t * (w.cols / 32) + i / 32] + kQuantAbs);
      }
      ref.exact.push_back(exact);
      ref.allowed.push_back(quant + acc_units * (abs_sum + quant));
    }
  }
  return ref;
}

// Checks the first n tokens' outputs; returns the worst error / allowed.
double check(const Reference& ref, size_t rows, size_t n, const std::vector<float>& got, size_t ys) {
  double worst = 0;
  for (size_t k = 0; k < ref.rows.size(); ++k) {
    for (size_t t = 0; t < n; ++t) {
      const double g = got[t * ys + ref.rows[k]], want = ref.exact[k * kMaxTokens + t];
      const double ratio = std::fabs(g - want) / (ref.allowed[k * kMaxTokens + t] + 1e-300);
      EXPECT_LE(ratio, 1.0) << "row " << ref.rows[k] << " token " << t << " n " << n << " got " << g << " exact "
                            << want;
      if (!(ratio <= 1.0)) return 2.0;  // one report per call is enough
      worst = std::max(worst, ratio);
    }
  }
  for (size_t t = 0; t < n; ++t) {
    for (size_t p = rows; p < ys; ++p) EXPECT_EQ(got[t * ys + p], 7.0f) << "stride padding overwritten";
  }
  return worst;
}

struct Shape {
  size_t rows, cols;
};

TEST(CudaGemmInt8, MatchesExactProductForEveryTokenCount) {
  DS_REQUIRE_GPU();
  // 9B shapes (4160 and 12352: not multiples of 256 rows), several K splits, short and wide ones.
  const Shape shapes[] = {{4096, 4096}, {1024, 4096}, {4160, 4096}, {12352, 4096},
                          {4096, 12288}, {37, 512}, {300, 1024}, {70000, 512}};
  Rng rng(5454);
  for (const Shape& s : shapes) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    const size_t xs = s.cols + 4, ys = s.rows + 3;  // padded strides
    const std::vector<float> x = make_x(s.cols, xs, rng);
    const size_t row_step = std::max<size_t>(1, s.rows * s.cols / (size_t{8} << 20));
    const Reference ref = reference(w, x, xs, row_step);
    double worst = 0;
    for (size_t n : {1, 5, 8, 13, 16, 17, 32, 64}) {
      worst = std::max(worst, check(ref, s.rows, n, run_int8(w, dw, x, xs, n, ys), ys));
    }
    std::printf("gemm_split_int8 %zux%zu (%d splits, every %zu-th row): worst error / allowed = %.3g\n", s.rows, s.cols,
                detail::gemm_q8_split_small_splits(s.rows, s.cols), row_step, worst);
  }
}

// The claim behind the kernel: weights exact, activations to ~2^-16 of their block's max, so the
// result is closer to the exact product than the bf16 kernel's (both bf16-rounded operands).
TEST(CudaGemmInt8, MorePreciseThanTheBf16Kernel) {
  DS_REQUIRE_GPU();
  Rng rng(77);
  const SplitHost w = make_split(4096, 4096, rng);
  DeviceArray<uint8_t> dw(w.split);
  const std::vector<float> x = make_x(4096, 4096, rng);
  const Reference ref = reference(w, x, 4096, 1);
  const size_t n = 8;
  DeviceArray<float> dx(x), dy(n * 4096);
  DS_CUDA_CHECK(detail::gemm_q8_split_small(w.device_view(dw.get()), dx.get(), 4096, n, dy.get(), 4096, nullptr));
  const std::vector<float> bf16 = dy.download();
  const std::vector<float> int8 = run_int8(w, dw, x, 4096, n, 4096);
  double err_bf16 = 0, err_int8 = 0;
  for (size_t r = 0; r < 4096; ++r) {
    for (size_t t = 0; t < n; ++t) {
      const double want = ref.exact[r * kMaxTokens + t];
      err_bf16 = std::max(err_bf16, std::fabs(bf16[t * 4096 + r] - want));
      err_int8 = std::max(err_int8, std::fabs(int8[t * 4096 + r] - want));
    }
  }
  std::printf("4096x4096, 8 tokens: max |error| int8 %.3g, bf16 %.3g\n", err_int8, err_bf16);
  EXPECT_LT(err_int8, err_bf16 / 4);  // observed margin printed above
}

// The activation representation on the CPU (no GPU needed): levels in range and x ~= u (254 a + b)
// within the proven bound, for random blocks, blocks at the rounding ties and the range's ends,
// subnormal scales, huge values.
TEST(Int8x2Levels, MeetTheirBoundOnTheCpu) {
  Rng rng(4242);
  const size_t cols = 32 * 64;
  std::vector<float> x = rng.vec(cols);
  for (size_t i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 15.5f;            // Q ties: +-0.5 steps
  for (size_t i = 32; i < 64; ++i) x[i] = (i % 2 ? 1.0f : -1.0f) * (1.0f + i * 1e-7f);  // near the max
  for (size_t i = 64; i < 96; ++i) x[i] *= 1e-37f;                                 // subnormal u
  for (size_t i = 96; i < 128; ++i) x[i] *= 1e-44f;                                // u rounds to 0
  for (size_t i = 128; i < 160; ++i) x[i] *= 3.0e38f;                              // huge
  for (size_t i = 160; i < 192; ++i) x[i] = 0.0f;                                  // all zero
  for (size_t i = 192; i < 224; ++i) x[i] = (i == 200 ? 1000.0f : x[i]);           // an outlier
  for (size_t blk = 8; blk < cols / 32; ++blk) {                                   // spread magnitudes
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
      const double ratio = err / (kQuantRel * m + kQuantAbs);
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

// The pre-pass alone: the bits of its CPU reference, levels in range, x ~= u (254 a + b) within the
// proven bound, a non-finite block gives u = NaN without touching its neighbours.
TEST(CudaGemmInt8, ActivationLevelsMeetTheirBound) {
  DS_REQUIRE_GPU();
  Rng rng(31);
  const size_t n = 5, cols = 1024, xs = 1030;
  std::vector<float> x = make_x(cols, xs, rng);
  x.resize(n * xs);
  x[4 * xs + 40] = std::numeric_limits<float>::infinity();  // token 4, block 1
  x[4 * xs + 70] = std::nanf("");                           // token 4, block 2
  for (size_t i = 0; i < 32; ++i) x[4 * xs + 96 + i] = (i % 2 ? 1.0f : -1.0f) * 3.0e38f;  // huge, finite
  DeviceArray<float> dx(x);
  DeviceArray<int8_t> levels(2 * n * cols);
  DeviceArray<float> scales(n * cols / 32);
  DS_CUDA_CHECK(detail::launch_x_to_int8x2(dx.get(), xs, n, cols, levels.get(), scales.get(), nullptr));
  const std::vector<int8_t> lv = levels.download();
  const std::vector<float> u = scales.download();
  std::vector<int8_t> cpu_levels(lv.size());
  std::vector<float> cpu_u(u.size());
  int8x2::reference_levels(x.data(), xs, n, cols, cpu_levels.data(), cpu_u.data());
  EXPECT_TRUE(same_bits(lv, cpu_levels)) << "device levels differ from the CPU reference";
  for (size_t i = 0; i < u.size(); ++i) {  // NaN payloads may differ; everything else bit for bit
    if (!(std::isnan(u[i]) && std::isnan(cpu_u[i]))) {
      EXPECT_EQ(u[i], cpu_u[i]) << "scale " << i;
    }
  }
  double worst = 0;
  for (size_t t = 0; t < n; ++t) {
    for (size_t blk = 0; blk < cols / 32; ++blk) {
      const float ub = u[t * (cols / 32) + blk];
      if (t == 4 && (blk == 1 || blk == 2)) {
        EXPECT_TRUE(std::isnan(ub)) << "block " << blk;
        continue;
      }
      double m = 0;
      for (size_t i = 0; i < 32; ++i) m = std::max(m, std::fabs(static_cast<double>(x[t * xs + blk * 32 + i])));
      for (size_t i = 0; i < 32; ++i) {
        const size_t c = blk * 32 + i;
        const int a = lv[t * cols + c], b = lv[(n + t) * cols + c];
        ASSERT_TRUE(a >= -127 && a <= 127 && b >= -127 && b <= 127) << a << " " << b;
        const double xhat = static_cast<double>(ub) * (254.0 * a + b);
        const double allowed = kQuantRel * m + kQuantAbs;
        const double ratio = std::fabs(xhat - x[t * xs + c]) / allowed;
        EXPECT_LE(ratio, 1.0) << "token " << t << " column " << c << " x " << x[t * xs + c] << " x^ " << xhat;
        worst = std::max(worst, ratio);
      }
    }
  }
  std::printf("int8x2 activations: worst error / allowed = %.3g\n", worst);
  EXPECT_EQ(detail::launch_x_to_int8x2(dx.get(), xs, n, 1000, levels.get(), scales.get(), nullptr),
            cudaErrorInvalidValue);  // not whole blocks
  EXPECT_EQ(detail::launch_x_to_int8x2(dx.get(), 512, n, cols, levels.get(), scales.get(), nullptr),
            cudaErrorInvalidValue);  // token rows overlap
}

// A token's bits must not depend on the other tokens of the call or on n, nor on the launch variant;
// a non-finite activation must not give a finite answer (nor spill into another token).
TEST(CudaGemmInt8, BatchInvariantBitwiseAndNonFinite) {
  DS_REQUIRE_GPU();
  Rng rng(818);
  for (const Shape& s : {Shape{300, 1024}, Shape{4096, 4096}, Shape{1024, 12288}}) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    const std::vector<float> x = make_x(s.cols, s.cols, rng);
    const std::vector<float> all = run_int8(w, dw, x, s.cols, 64, s.rows);
    for (size_t j : {0, 1, 3, 9, 31, 63}) {
      const std::vector<float> xj(x.begin() + j * s.cols, x.begin() + (j + 1) * s.cols);
      const std::vector<float> alone = run_int8(w, dw, xj, s.cols, 1, s.rows);
      ASSERT_EQ(std::memcmp(alone.data(), all.data() + j * s.rows, s.rows * sizeof(float)), 0)
          << s.rows << "x" << s.cols << " token " << j << " alone differs from its 64-token row";
    }
    const std::vector<float> x7(x.begin() + 20 * s.cols, x.begin() + 27 * s.cols);
    const std::vector<float> seven = run_int8(w, dw, x7, s.cols, 7, s.rows);
    ASSERT_EQ(std::memcmp(seven.data(), all.data() + 20 * s.rows, 7 * s.rows * sizeof(float)), 0) << s.rows;
    for (int v = 0; v < detail::kSplitInt8Variants; ++v) {
      for (size_t n : {size_t{3}, size_t{16}, size_t{64}}) {
        const std::vector<float> got = run_int8(w, dw, x, s.cols, n, s.rows, v);
        EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size() * sizeof(float)), 0)
            << s.rows << "x" << s.cols << " variant " << v << " n=" << n;
      }
    }
  }
  const SplitHost w = make_split(64, 512, rng);
  DeviceArray<uint8_t> dw(w.split);
  std::vector<float> x = rng.vec(2 * 512);
  x[512 + 5] = std::numeric_limits<float>::infinity();
  const std::vector<float> got = run_int8(w, dw, x, 512, 2, 64);
  for (size_t r = 0; r < 64; ++r) {
    EXPECT_TRUE(std::isfinite(got[r])) << "token 0 row " << r << " polluted by token 1";
    EXPECT_FALSE(std::isfinite(got[64 + r])) << "row " << r;
  }
}

// As dependent launches (weights loaded before the previous kernel finished) the kernels must still
// read the activations that kernel wrote: a producer (add_inplace writing x) right before gives the
// bits of ordinary launches, for every variant, with and without a K split.
TEST(CudaGemmInt8, DependentLaunchGivesTheSameBits) {
  DS_REQUIRE_GPU();
  Rng rng(92);
  for (const Shape& s : {Shape{4096, 4096}, Shape{70000, 512}}) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    const std::vector<float> x = rng.vec(24 * s.cols);
    const std::vector<float> want = run_int8(w, dw, x, s.cols, 24, s.rows);
    DeviceArray<float> src(x), dx(x.size()), dy(24 * s.rows);
    for (int variant = 0; variant < detail::kSplitInt8Variants; ++variant) {
      DS_CUDA_CHECK(cudaMemset(dy.get(), 0, 24 * s.rows * sizeof(float)));
      DS_CUDA_CHECK(cudaMemset(dx.get(), 0, x.size() * sizeof(float)));
      DS_CUDA_CHECK(add_inplace(dx.get(), src.get(), x.size(), nullptr));  // the producer kernel
      DS_CUDA_CHECK(detail::gemm_q8_split_int8_variant(variant, w.device_view(dw.get()), dx.get(), s.cols, 24,
                                                       dy.get(), s.rows, nullptr, /*dependent=*/true));
      const std::vector<float> got = dy.download();
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << s.rows << "x" << s.cols << " variant " << variant << " ("
          << detail::gemm_q8_split_small_splits(s.rows, s.cols) << " splits)";
    }
  }
}

// A stacked matrix's product written to row segments in one pass equals the whole product's rows
// bit for bit, with and without a K split; bad segment lists are refused.
TEST(CudaGemmInt8, RowSegmentsEqualTheWholeProduct) {
  DS_REQUIRE_GPU();
  expect_row_segments_equal_whole(
      {{4096 + 1024 + 64, 1024}, {12352, 4096}, {70000, 512}},
      [](const SplitHost& w, const DeviceArray<uint8_t>& dw, const std::vector<float>& x, size_t n) {
        return run_int8(w, dw, x, w.cols, n, w.rows);
      },
      [](const cpu::WeightView& w, const float* x, size_t xs, size_t n, const RowSegments& out, bool dependent) {
        return detail::gemm_q8_split_int8_rows(w, x, xs, n, out, nullptr, dependent);
      });
}

// cuda::matmul (and matmul_rows) take the int8 kernel for 5..split_small_max tokens only when
// TcGemmOptions::split_small_int8 asks; otherwise the bf16 one. 1..4 tokens stay on the GEMV.
TEST(CudaGemmInt8, MatmulDispatchTakesItWhenAsked) {
  DS_REQUIRE_GPU();
  Rng rng(23);
  const SplitHost w = make_split(300, 2048, rng);
  DeviceArray<uint8_t> dw(w.split);
  const std::vector<float> x = rng.vec(64 * 2048);
  DeviceArray<float> dx(x);
  TcGemmOptions tc;
  tc.split_small_max = 64;
  const auto via_matmul = [&](size_t n, bool int8) {
    tc.split_small_int8 = int8;
    DeviceArray<float> dy(n * 300);
    DS_CUDA_CHECK(matmul(w.device_view(dw.get()), dx.get(), 2048, n, dy.get(), 300, MatmulPrecision::kBf16TensorCores,
                         tc, nullptr));
    return dy.download();
  };
  for (size_t n : {size_t{5}, size_t{64}}) {
    const std::vector<float> want = run_int8(w, dw, x, 2048, n, 300);
    const std::vector<float> got = via_matmul(n, true);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "n=" << n;
    const std::vector<float> bf16 = via_matmul(n, false);
    EXPECT_NE(std::memcmp(bf16.data(), want.data(), bf16.size() * sizeof(float)), 0) << "n=" << n << " without int8";
    // The stacked form: two row segments, the same bits as the whole product.
    tc.split_small_int8 = true;
    DeviceArray<float> top(n * 100), bottom(n * 200);
    RowSegments seg;
    seg.n = 2;
    seg.first[0] = 0, seg.first[1] = 100, seg.first[2] = 300;
    seg.y[0] = top.get(), seg.y[1] = bottom.get();
    seg.ys[0] = 100, seg.ys[1] = 200;
    DS_CUDA_CHECK(matmul_rows(w.device_view(dw.get()), dx.get(), 2048, n, seg, MatmulPrecision::kBf16TensorCores, tc,
                              nullptr));
    const std::vector<float> t = top.download(), b = bottom.download();
    for (size_t j = 0; j < n; ++j) {
      EXPECT_EQ(std::memcmp(t.data() + j * 100, want.data() + j * 300, 100 * sizeof(float)), 0) << "n=" << n;
      EXPECT_EQ(std::memcmp(b.data() + j * 200, want.data() + j * 300 + 100, 200 * sizeof(float)), 0) << "n=" << n;
    }
  }
}

TEST(CudaGemmInt8, RejectsWhatItCannotRead) {
  DS_REQUIRE_GPU();
  DeviceArray<uint8_t> dw(64 * 1088 + 64);
  DeviceArray<float> dx(65 * 1024 + 8), dy(65 * 64);
  const cpu::WeightView ok{GgmlType::Q8_0_SPLIT, dw.get(), 64, 1024, 1088};
  EXPECT_TRUE(detail::gemm_q8_split_int8_applies(ok, dx.get(), 1024, dy.get(), 64, 64));
  EXPECT_EQ(detail::gemm_q8_split_int8(ok, dx.get(), 1024, 65, dy.get(), 64, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(detail::gemm_q8_split_int8(ok, dx.get(), 1024, 0, dy.get(), 64, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(detail::gemm_q8_split_int8(ok, dx.get(), 1000, 2, dy.get(), 64, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(detail::gemm_q8_split_int8(ok, dx.get(), 1024, 2, dy.get(), 63, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(detail::gemm_q8_split_int8(ok, dx.get() + 1, 1024, 1, reinterpret_cast<float*>(
                                           reinterpret_cast<uint8_t*>(dy.get()) + 2), 64, nullptr),
            cudaErrorInvalidValue);  // y not 4-byte aligned
  cpu::WeightView gguf = ok;
  gguf.type = GgmlType::Q8_0;  // wrong type: GGUF order is another kernel's job
  EXPECT_EQ(detail::gemm_q8_split_int8(gguf, dx.get(), 1024, 8, dy.get(), 64, nullptr), cudaErrorNotSupported);
  cpu::WeightView f16 = ok;
  f16.type = GgmlType::F16;
  EXPECT_EQ(detail::gemm_q8_split_int8(f16, dx.get(), 1024, 8, dy.get(), 64, nullptr), cudaErrorNotSupported);
  cpu::WeightView narrow{GgmlType::Q8_0_SPLIT, dw.get(), 64, 160, 170};  // not whole 256-column units
  EXPECT_EQ(detail::gemm_q8_split_int8(narrow, dx.get(), 160, 8, dy.get(), 64, nullptr), cudaErrorInvalidValue);
  cpu::WeightView shifted = ok;
  shifted.data = dw.get() + 8;  // misaligned weights
  EXPECT_EQ(detail::gemm_q8_split_int8(shifted, dx.get(), 1024, 8, dy.get(), 64, nullptr), cudaErrorInvalidValue);
  cpu::WeightView padded = ok;
  padded.row_bytes = 1104;  // not the packed row
  EXPECT_EQ(detail::gemm_q8_split_int8(padded, dx.get(), 1024, 8, dy.get(), 64, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(detail::gemm_q8_split_int8_variant(detail::kSplitInt8Variants, ok, dx.get(), 1024, 8, dy.get(), 64,
                                               nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(detail::gemm_q8_split_int8_variant(-1, ok, dx.get(), 1024, 8, dy.get(), 64, nullptr), cudaErrorInvalidValue);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace ds::cuda::test
