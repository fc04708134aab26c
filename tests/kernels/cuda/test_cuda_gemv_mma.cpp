// The small-batch Q8_0 tensor-core kernel (kernels/cuda/gemv_q8_mma.h) against the CPU f32
// reference and an exact (double) dot product: odd row counts, widths that are multiples of 32
// but not of 256, every token count 1..64, padded strides; bitwise batch invariance; rejected
// arguments; the cuda::matmul dispatch behind TcGemmOptions::small_batch_mma; and split rows
// (GgmlType::Q8_0_SPLIT), which must give the GGUF-order bits exactly.
//
// Tolerance (vs the exact dot product of the dequantized weights and x): the kernel's proven
// worst case, mma_gemv_error_units(cols) * 2^-23 * sum|w_i x_i| (gemv_q8_mma.h: exact int8 quants
// in bf16, x split into three bf16 terms leaving |x|*2^-24, f32 accumulation inside each mma and
// one rounding per block scale, per block added and per split added). Versus the CPU f32
// reference we allow that plus the CPU's own 2e-6 * sum|w x| (test_cuda_matmul.cpp). Both checks
// print the observed worst error / allowed so the actual margin is on record.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/ggml_types.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/gemv_q8_mma.h"
#include "kernels/cuda/matmul.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

// Random Q8_0 matrix whose rows are padded to a multiple of 16 bytes (row_bytes_pad = 0: the
// packed GGUF row, 16-byte aligned only when cols is a multiple of 256).
struct Q8Host {
  size_t rows, cols, row_bytes;
  std::vector<uint8_t> bytes;
  cpu::WeightView view(const void* base) const { return {GgmlType::Q8_0, base, rows, cols, row_bytes}; }
};

Q8Host make_q8(size_t rows, size_t cols, bool pad_to_16, Rng& rng) {
  const size_t packed = cols / 32 * 34;
  Q8Host w{rows, cols, pad_to_16 ? (packed + 15) / 16 * 16 : packed, {}};
  w.bytes.assign(rows * w.row_bytes, 0xA5);  // padding bytes are garbage on purpose
  for (size_t r = 0; r < rows; ++r) {
    uint8_t* row = w.bytes.data() + r * w.row_bytes;
    for (size_t b = 0; b < cols / 32; ++b) {
      const uint16_t d = fp32_to_fp16(rng.uniform(0.001f, 0.05f));
      std::memcpy(row + b * 34, &d, 2);
      for (size_t i = 0; i < 32; ++i) row[b * 34 + 2 + i] = static_cast<uint8_t>(rng.integer(-128, 127));
    }
  }
  return w;
}

// Runs the kernel on n tokens of x (row stride xs) into y (row stride ys); returns the host copy.
std::vector<float> run_mma(const Q8Host& w, const DeviceArray<uint8_t>& dw, const std::vector<float>& x, size_t xs,
                           size_t n, size_t ys) {
  DeviceArray<float> dx(x), dy(n * ys);
  dy.upload(std::vector<float>(n * ys, 7.0f));  // padding must survive
  DS_CUDA_CHECK(detail::gemv_q8_mma(w.view(dw.get()), dx.get(), xs, n, dy.get(), ys, nullptr));
  return dy.download();
}

struct Shape {
  size_t rows, cols;
};

// Checks every element of y against the exact and the CPU f32 products; returns worst/allowed.
double check_against_references(const Q8Host& w, const std::vector<float>& x, size_t xs, size_t n,
                                const std::vector<float>& got, size_t ys) {
  std::vector<float> cpu_y(n * ys, 7.0f);
  cpu::matmul(w.view(w.bytes.data()), x.data(), xs, n, cpu_y.data(), ys, nullptr);
  const double bound = static_cast<double>(detail::mma_gemv_error_units(w.cols)) * std::ldexp(1.0, -23);
  std::vector<float> wrow(w.cols);
  double worst = 0;
  for (size_t r = 0; r < w.rows; ++r) {
    cpu::weight_row(w.view(w.bytes.data()), r, wrow.data());
    for (size_t t = 0; t < n; ++t) {
      double exact = 0, abs_sum = 0;
      for (size_t i = 0; i < w.cols; ++i) {
        const double p = static_cast<double>(wrow[i]) * x[t * xs + i];
        exact += p;
        abs_sum += std::fabs(p);
      }
      const double g = got[t * ys + r];
      const double e_exact = std::fabs(g - exact) / (bound * abs_sum + 1e-30);
      const double e_cpu = std::fabs(g - cpu_y[t * ys + r]) / ((bound + 2e-6) * abs_sum + 1e-30);
      EXPECT_LE(e_exact, 1.0) << "row " << r << " token " << t << " got " << g << " exact " << exact;
      EXPECT_LE(e_cpu, 1.0) << "row " << r << " token " << t << " got " << g << " cpu " << cpu_y[t * ys + r];
      worst = std::max({worst, e_exact, e_cpu});
    }
    for (size_t t = 0; t < n; ++t) {  // stride padding untouched
      for (size_t p = w.rows; p < ys && r == 0; ++p) EXPECT_EQ(got[t * ys + p], 7.0f);
    }
  }
  return worst;
}

TEST(CudaGemvMma, MatchesReferencesOnOddShapesForEveryTokenCount) {
  DS_REQUIRE_GPU();
  // Odd row counts (not a multiple of the 128-row block or the 16-row tile), widths that are
  // multiples of 32 but not of 256 (a short last chunk), a split-K shape and a long row.
  const Shape shapes[] = {{67, 96}, {129, 800}, {300, 4096}, {33, 12288}};
  Rng rng(4242);
  for (const Shape& s : shapes) {
    const Q8Host w = make_q8(s.rows, s.cols, true, rng);
    DeviceArray<uint8_t> dw(w.bytes);
    const size_t xs = s.cols + 5, ys = s.rows + 3;
    const std::vector<float> x = rng.vec(64 * xs);
    double worst = 0;
    // Every n for the small shapes; a spread for the big ones (the CPU check is O(n rows cols)).
    for (size_t n = 1; n <= 64; n += (s.cols >= 4096 ? 9 : 1)) {
      worst = std::max(worst, check_against_references(w, x, xs, n, run_mma(w, dw, x, xs, n, ys), ys));
    }
    std::printf("gemv_mma %zux%zu: worst error / allowed = %.3g (allowed %zu * 2^-23 * sum|wx|)\n", s.rows, s.cols,
                worst, detail::mma_gemv_error_units(s.cols));
  }
}

// A row's bits must not depend on which other tokens share the call, nor on n.
TEST(CudaGemvMma, BatchInvariantBitwise) {
  DS_REQUIRE_GPU();
  const Shape shapes[] = {{300, 800}, {4096, 4096}};  // the second splits K across blocks
  Rng rng(77);
  for (const Shape& s : shapes) {
    const Q8Host w = make_q8(s.rows, s.cols, true, rng);
    DeviceArray<uint8_t> dw(w.bytes);
    const std::vector<float> x = rng.vec(64 * s.cols);
    const std::vector<float> all = run_mma(w, dw, x, s.cols, 64, s.rows);
    for (size_t j : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{31}, size_t{63}}) {
      const std::vector<float> xj(x.begin() + j * s.cols, x.begin() + (j + 1) * s.cols);
      const std::vector<float> alone = run_mma(w, dw, xj, s.cols, 1, s.rows);
      ASSERT_EQ(std::memcmp(alone.data(), all.data() + j * s.rows, s.rows * sizeof(float)), 0)
          << s.rows << "x" << s.cols << " token " << j << " alone differs from its row in a 64-token call";
    }
    // A 5-token window starting at token 3 (other neighbours, other n).
    const std::vector<float> x5(x.begin() + 3 * s.cols, x.begin() + 8 * s.cols);
    const std::vector<float> five = run_mma(w, dw, x5, s.cols, 5, s.rows);
    ASSERT_EQ(std::memcmp(five.data(), all.data() + 3 * s.rows, 5 * s.rows * sizeof(float)), 0);
  }
}

// The launch variants differ in load scheduling only: the same bits as the default (which the
// parity test above holds to the references), for every token count either takes.
TEST(CudaGemvMma, VariantsGiveTheSameBits) {
  DS_REQUIRE_GPU();
  Rng rng(31);
  for (const Shape& s : {Shape{129, 800}, Shape{4096, 4096}}) {
    const Q8Host w = make_q8(s.rows, s.cols, true, rng);
    DeviceArray<uint8_t> dw(w.bytes);
    const std::vector<float> x = rng.vec(64 * s.cols);
    DeviceArray<float> dx(x);
    for (size_t n : {size_t{1}, size_t{5}, size_t{8}, size_t{9}, size_t{16}, size_t{17}, size_t{64}}) {
      const std::vector<float> want = run_mma(w, dw, x, s.cols, n, s.rows);
      for (int v = 0; v < detail::kMmaGemvVariants; ++v) {
        if (v == detail::kMmaGemvDefaultVariant) continue;  // `want` is the default
        DeviceArray<float> dy(n * s.rows);
        DS_CUDA_CHECK(detail::gemv_q8_mma_variant(v, w.view(dw.get()), dx.get(), s.cols, n, dy.get(), s.rows, nullptr));
        const std::vector<float> got = dy.download();
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "variant " << v << " n=" << n << " " << s.rows << "x" << s.cols;
      }
    }
  }
  DeviceArray<float> dx(96), dy(40);
  const cpu::WeightView w{GgmlType::Q8_0, dx.get(), 40, 96, 112};
  EXPECT_EQ(detail::gemv_q8_mma_variant(detail::kMmaGemvVariants, w, dx.get(), 96, 1, dy.get(), 40, nullptr),
            cudaErrorInvalidValue);
}

TEST(CudaGemvMma, RejectsBadArgumentsWithErrors) {
  DS_REQUIRE_GPU();
  Rng rng(5);
  const Q8Host packed = make_q8(40, 96, false, rng);  // 102-byte rows: not 16-byte aligned
  DeviceArray<uint8_t> dw(packed.bytes.size() + 64);
  DeviceArray<float> dx(64 * 96 + 1), dy(65 * 40);
  auto call = [&](const cpu::WeightView& w, size_t n, size_t xs = 96, size_t ys = 40) {
    return detail::gemv_q8_mma(w, dx.get(), xs, n, dy.get(), ys, nullptr);
  };
  EXPECT_EQ(call(packed.view(dw.get()), 2), cudaErrorMisalignedAddress);  // unaligned row stride
  cpu::WeightView ok{GgmlType::Q8_0, dw.get(), 40, 96, 112};
  EXPECT_EQ(call(ok, 2), cudaSuccess);
  cpu::WeightView shifted = ok;
  shifted.data = dw.get() + 8;  // 8-byte aligned base
  EXPECT_EQ(call(shifted, 2), cudaErrorMisalignedAddress);
  EXPECT_EQ(call(ok, 65), cudaErrorInvalidValue);         // too many tokens
  EXPECT_EQ(call(ok, 2, 95), cudaErrorInvalidValue);      // x stride < cols
  EXPECT_EQ(call(ok, 2, 96, 39), cudaErrorInvalidValue);  // y stride < rows
  cpu::WeightView narrow = ok;
  narrow.cols = 80;  // not a multiple of 32
  EXPECT_EQ(call(narrow, 2), cudaErrorInvalidValue);
  cpu::WeightView short_rows = ok;
  short_rows.row_bytes = 96;  // < 3 * 34
  EXPECT_EQ(call(short_rows, 2), cudaErrorInvalidValue);
  cpu::WeightView f16 = ok;
  f16.type = GgmlType::F16;
  EXPECT_EQ(call(f16, 2), cudaErrorNotSupported);
  EXPECT_EQ(detail::gemv_q8_mma(ok, nullptr, 96, 2, dy.get(), 40, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(detail::gemv_q8_mma(ok, dx.get() + 1, 96, 2, dy.get(), 40, nullptr), cudaSuccess);  // 4-byte x is fine
  DS_CUDA_CHECK(cudaDeviceSynchronize());
}

// Split rows (GgmlType::Q8_0_SPLIT): the same matrix in both layouts gives the same bits (only
// where the warps find a block's quants and scale differs), for every variant, with and without
// split K, for 1..64 tokens; split rows whose width is not whole 256-column chunks are refused.
TEST(CudaGemvMma, SplitRowsGiveTheSameBits) {
  DS_REQUIRE_GPU();
  Rng rng(55);
  for (const Shape& s : {Shape{129, 512}, Shape{300, 4096}, Shape{4096, 4096}}) {
    const Q8Host w = make_q8(s.rows, s.cols, false, rng);  // packed rows: 16-byte multiples here
    DeviceArray<uint8_t> dw(w.bytes), dsplit(q8_split_copy(w.bytes.data(), s.rows, s.cols));
    const cpu::WeightView split{GgmlType::Q8_0_SPLIT, dsplit.get(), s.rows, s.cols, w.row_bytes};
    const std::vector<float> x = rng.vec(64 * s.cols);
    DeviceArray<float> dx(x);
    for (size_t n : {size_t{1}, size_t{2}, size_t{8}, size_t{9}, size_t{16}, size_t{33}, size_t{64}}) {
      const std::vector<float> want = run_mma(w, dw, x, s.cols, n, s.rows);
      for (int v = 0; v < detail::kMmaGemvVariants; ++v) {
        DeviceArray<float> dy(n * s.rows);
        DS_CUDA_CHECK(detail::gemv_q8_mma_variant(v, split, dx.get(), s.cols, n, dy.get(), s.rows, nullptr));
        EXPECT_TRUE(same_bits(dy.download(), want)) << "variant " << v << " n=" << n << " " << s.rows << "x" << s.cols;
      }
    }
  }
  DeviceArray<uint8_t> dw(40 * 176);
  DeviceArray<float> dx(160), dy(40);
  const cpu::WeightView narrow{GgmlType::Q8_0_SPLIT, dw.get(), 40, 160, 176};  // 5 blocks: a short chunk
  EXPECT_FALSE(detail::gemv_q8_mma_applies(narrow, dx.get(), 160, dy.get(), 40, 1));
  EXPECT_EQ(detail::gemv_q8_mma(narrow, dx.get(), 160, 1, dy.get(), 40, nullptr), cudaErrorInvalidValue);
}

// cuda::matmul with small_batch_mma takes the kernel in its token range (same bits as calling it)
// and falls back (still correct) where it does not apply.
TEST(CudaGemvMma, MatmulDispatch) {
  DS_REQUIRE_GPU();
  Rng rng(9);
  TcGemmOptions tc;
  tc.small_batch_mma = true;
  tc.small_batch_mma_min = 1;  // the kernel's whole range (the default range is narrower)
  tc.small_batch_mma_max = 64;
  const Q8Host w = make_q8(129, 800, true, rng);
  DeviceArray<uint8_t> dw(w.bytes);
  const std::vector<float> x = rng.vec(64 * 800);
  DeviceArray<float> dx(x);
  for (size_t n : {size_t{2}, size_t{9}, size_t{16}, size_t{64}}) {
    const std::vector<float> direct = run_mma(w, dw, x, 800, n, 129);
    DeviceArray<float> dy(n * 129);
    DS_CUDA_CHECK(
        matmul(w.view(dw.get()), dx.get(), 800, n, dy.get(), 129, MatmulPrecision::kBf16TensorCores, tc, nullptr));
    const std::vector<float> got = dy.download();
    EXPECT_EQ(std::memcmp(got.data(), direct.data(), got.size() * sizeof(float)), 0) << "n=" << n;
  }
  const Q8Host packed = make_q8(40, 96, false, rng);  // unaligned rows: the f32 GEMV runs instead
  DeviceArray<uint8_t> dp(packed.bytes);
  const std::vector<float> x4(x.begin(), x.begin() + 4 * 96);
  DeviceArray<float> dx4(x4), dy4(4 * 40);
  DS_CUDA_CHECK(matmul(packed.view(dp.get()), dx4.get(), 96, 4, dy4.get(), 40, MatmulPrecision::kF32, tc, nullptr));
  EXPECT_LE(check_against_references(packed, x4, 96, 4, dy4.download(), 40), 1.0);
}

}  // namespace
}  // namespace ds::cuda::test
