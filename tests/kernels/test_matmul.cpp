#include <gtest/gtest.h>

#include <cfloat>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/kernel_test_util.h"

namespace ds::cpu {
namespace {

using test::Rng;

// A weight matrix in some GGUF type plus its exact values as doubles.
struct TestWeight {
  GgmlType type;
  size_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<double> values;  // [rows][cols], the exact dequantized values
  WeightView view() const { return {type, bytes.data(), rows, cols, bytes.size() / rows}; }
};

// Builds a weight whose dequantized values are make(r, c) rounded to the type (for Q8_0 the
// caller supplies ints and a power-of-two or random fp16 scale per block through make_q8).
template <typename F>
TestWeight make_plain(GgmlType type, size_t rows, size_t cols, F make) {
  TestWeight w{type, rows, cols, {}, {}};
  const size_t esz = type == GgmlType::F32 ? 4 : 2;
  w.bytes.resize(rows * cols * esz);
  w.values.resize(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const float f = make(r, c);
      uint8_t* dst = w.bytes.data() + (r * cols + c) * esz;
      if (type == GgmlType::F32) {
        std::memcpy(dst, &f, 4);
        w.values[r * cols + c] = f;
      } else if (type == GgmlType::F16) {
        const uint16_t h = fp32_to_fp16(f);
        std::memcpy(dst, &h, 2);
        w.values[r * cols + c] = fp16_to_fp32(h);
      } else {
        const uint16_t h = fp32_to_bf16(f);
        std::memcpy(dst, &h, 2);
        w.values[r * cols + c] = bf16_to_fp32(h);
      }
    }
  }
  return w;
}

// Q8_0 with per-block scale scale(r, block) and ints q(r, c).
template <typename S, typename Q>
TestWeight make_q8(size_t rows, size_t cols, S scale, Q q) {
  TestWeight w{GgmlType::Q8_0, rows, cols, {}, {}};
  const size_t nb = cols / 32;
  w.bytes.resize(rows * nb * sizeof(BlockQ8_0));
  w.values.resize(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t b = 0; b < nb; ++b) {
      BlockQ8_0 blk;
      blk.d = fp32_to_fp16(scale(r, b));
      const double d = fp16_to_fp32(blk.d);
      for (size_t i = 0; i < 32; ++i) {
        blk.qs[i] = static_cast<int8_t>(q(r, b * 32 + i));
        w.values[r * cols + b * 32 + i] = d * blk.qs[i];
      }
      std::memcpy(w.bytes.data() + (r * nb + b) * sizeof(BlockQ8_0), &blk, sizeof(blk));
    }
  }
  return w;
}

// y_ref[t][r] = sum_c w[r][c] x[t][c] in double; also sum |w x| for error bounds.
void reference(const TestWeight& w, const std::vector<float>& x, size_t n_tokens, std::vector<double>* y,
               std::vector<double>* abs_sum) {
  y->assign(n_tokens * w.rows, 0.0);
  abs_sum->assign(n_tokens * w.rows, 0.0);
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t r = 0; r < w.rows; ++r) {
      double s = 0, a = 0;
      for (size_t c = 0; c < w.cols; ++c) {
        const double p = w.values[r * w.cols + c] * static_cast<double>(x[t * w.cols + c]);
        s += p;
        a += std::abs(p);
      }
      (*y)[t * w.rows + r] = s;
      (*abs_sum)[t * w.rows + r] = a;
    }
  }
}

std::vector<float> run(const TestWeight& w, const std::vector<float>& x, size_t n_tokens, ThreadPool* pool) {
  std::vector<float> y(n_tokens * w.rows, -1.0f);
  matmul(w.view(), x.data(), w.cols, n_tokens, y.data(), w.rows, pool);
  return y;
}

const size_t kRows[] = {1, 3, 19, 33, 99};
const size_t kTokens[] = {1, 3, 130};  // 130 crosses the 128-token work block

// Small integers: every product and partial sum is an integer < 2^24, so any summation order
// is exact and the result must equal the exact sum bit for bit.
TEST(Matmul, SmallIntegersAreExact) {
  Rng rng(1);
  ThreadPool pool(2);
  for (size_t rows : kRows) {
    for (size_t cols : {size_t{7}, size_t{31}, size_t{64}, size_t{100}, size_t{256}}) {
      for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
        if (type == GgmlType::Q8_0 && cols % 32 != 0) continue;
        TestWeight w = type == GgmlType::Q8_0 ? make_q8(
                                                    rows, cols, [](size_t, size_t) { return 1.0f; },
                                                    [&](size_t, size_t) { return rng.integer(-127, 127); })
                                              : make_plain(type, rows, cols, [&](size_t, size_t) {
                                                  return static_cast<float>(rng.integer(-100, 100));
                                                });
        for (size_t n_tokens : kTokens) {
          std::vector<float> x(n_tokens * cols);
          for (auto& v : x) v = static_cast<float>(rng.integer(-8, 8));
          std::vector<double> ref, abs_sum;
          reference(w, x, n_tokens, &ref, &abs_sum);
          const auto y = run(w, x, n_tokens, &pool);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_EQ(static_cast<double>(y[i]), ref[i]) << ggml_type_name(type) << " " << rows << "x" << cols;
          }
        }
      }
    }
  }
}

// Random values: f32 accumulation of n products has error <= n * eps * sum|w x| (a standard
// bound; the lane-wise sum is much better), and dequantized weights are exact in f32.
TEST(Matmul, RandomMatchesFloat64) {
  Rng rng(2);
  ThreadPool pool(2);
  for (size_t rows : kRows) {
    for (size_t cols : {size_t{32}, size_t{64}, size_t{96}, size_t{256}}) {
      for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
        TestWeight w = type == GgmlType::Q8_0
                           ? make_q8(
                                 rows, cols, [&](size_t, size_t) { return rng.uniform(0.001f, 0.02f); },
                                 [&](size_t, size_t) { return rng.integer(-127, 127); })
                           : make_plain(type, rows, cols, [&](size_t, size_t) { return rng.uniform(-1, 1); });
        for (size_t n_tokens : kTokens) {
          const auto x = rng.vec(n_tokens * cols);
          std::vector<double> ref, abs_sum;
          reference(w, x, n_tokens, &ref, &abs_sum);
          const auto y = run(w, x, n_tokens, &pool);
          for (size_t i = 0; i < y.size(); ++i) {
            const double tol = static_cast<double>(cols) * FLT_EPSILON * abs_sum[i];
            ASSERT_NEAR(y[i], ref[i], tol) << ggml_type_name(type) << " " << rows << "x" << cols;
          }
        }
      }
    }
  }
}

// A token's result must not depend on the batch it is in nor on the thread count (prefill and
// decode must agree bit for bit).
TEST(Matmul, BatchAndThreadIndependent) {
  Rng rng(3);
  ThreadPool pool1(1), pool2(2), pool3(3);
  const TestWeight w = make_q8(
      99, 96, [&](size_t, size_t) { return rng.uniform(0.001f, 0.02f); },
      [&](size_t, size_t) { return rng.integer(-127, 127); });
  const size_t n_tokens = 300;
  const auto x = rng.vec(n_tokens * w.cols);
  const auto y1 = run(w, x, n_tokens, &pool1);
  EXPECT_EQ(y1, run(w, x, n_tokens, &pool2));
  EXPECT_EQ(y1, run(w, x, n_tokens, &pool3));
  EXPECT_EQ(y1, run(w, x, n_tokens, nullptr));
  for (size_t t : {size_t{0}, size_t{129}, size_t{299}}) {
    std::vector<float> xt(x.begin() + static_cast<std::ptrdiff_t>(t * w.cols),
                          x.begin() + static_cast<std::ptrdiff_t>((t + 1) * w.cols));
    const auto yt = run(w, xt, 1, &pool2);
    for (size_t r = 0; r < w.rows; ++r) ASSERT_EQ(yt[r], y1[t * w.rows + r]);
  }
}

TEST(Matmul, StridesLeavePaddingAlone) {
  Rng rng(4);
  const TestWeight w = make_plain(GgmlType::F16, 19, 31, [&](size_t, size_t) { return rng.uniform(-1, 1); });
  const size_t n_tokens = 5, x_stride = 40, y_stride = 23;
  std::vector<float> x(n_tokens * x_stride, 1e30f);  // padding would poison the result
  for (size_t t = 0; t < n_tokens; ++t)
    for (size_t c = 0; c < w.cols; ++c) x[t * x_stride + c] = rng.uniform(-1, 1);
  std::vector<float> y(n_tokens * y_stride, 7.0f);
  matmul(w.view(), x.data(), x_stride, n_tokens, y.data(), y_stride, nullptr);
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t r = 0; r < y_stride; ++r) {
      if (r >= w.rows) {
        EXPECT_EQ(y[t * y_stride + r], 7.0f);
        continue;
      }
      double ref = 0;
      for (size_t c = 0; c < w.cols; ++c) ref += w.values[r * w.cols + c] * x[t * x_stride + c];
      EXPECT_NEAR(y[t * y_stride + r], ref, 1e-5);
    }
  }
}

TEST(Matmul, WeightRowAndUnsupportedType) {
  Rng rng(5);
  const TestWeight w = make_q8(
      3, 64, [&](size_t, size_t) { return 0.5f; }, [&](size_t, size_t) { return rng.integer(-127, 127); });
  std::vector<float> row(64);
  weight_row(w.view(), 2, row.data());
  for (size_t c = 0; c < 64; ++c) EXPECT_EQ(row[c], w.values[2 * 64 + c]);

  std::vector<uint8_t> q4k(144 * 2);
  const WeightView bad{GgmlType::Q4_K, q4k.data(), 2, 256, 144};
  std::vector<float> x(256), y(2);
  EXPECT_THROW(matmul(bad, x.data(), 256, 1, y.data(), 2, nullptr), FormatError);
  EXPECT_THROW(weight_row(bad, 0, x.data()), FormatError);
}

TEST(Embedding, GathersRowsAndChecksIds) {
  Rng rng(6);
  const TestWeight w = make_q8(
      10, 32, [&](size_t, size_t) { return rng.uniform(0.001f, 0.02f); },
      [&](size_t, size_t) { return rng.integer(-127, 127); });
  const int32_t ids[] = {9, 0, 9, 4};
  std::vector<float> out(4 * 32);
  embed_rows(w.view(), ids, 4, out.data());
  for (size_t t = 0; t < 4; ++t)
    for (size_t c = 0; c < 32; ++c) EXPECT_EQ(out[t * 32 + c], w.values[static_cast<size_t>(ids[t]) * 32 + c]);
  const int32_t bad1[] = {10}, bad2[] = {-1};
  EXPECT_THROW(embed_rows(w.view(), bad1, 1, out.data()), FormatError);
  EXPECT_THROW(embed_rows(w.view(), bad2, 1, out.data()), FormatError);
}

// Not a correctness test: prints GEMM / GEMV timings with 2 threads (the tiny model's shapes).
TEST(Matmul, SpeedReport) {
  Rng rng(7);
  ThreadPool pool(2);
  auto time_ms = [&](const TestWeight& w, size_t n_tokens, int reps) {
    const auto x = rng.vec(n_tokens * w.cols);
    std::vector<float> y(n_tokens * w.rows);
    matmul(w.view(), x.data(), w.cols, n_tokens, y.data(), w.rows, &pool);  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) matmul(w.view(), x.data(), w.cols, n_tokens, y.data(), w.rows, &pool);
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(t1 - t0).count() / reps;
  };
  const TestWeight gemm_w = make_q8(
      128, 64, [&](size_t, size_t) { return 0.01f; }, [&](size_t, size_t) { return rng.integer(-127, 127); });
  const double gemm = time_ms(gemm_w, 1500, 5);
  const TestWeight lm_head = make_q8(
      151936, 64, [&](size_t, size_t) { return 0.01f; },
      [&](size_t r, size_t c) { return static_cast<int>((r * 7 + c) % 255) - 127; });
  const double gemv = time_ms(lm_head, 1, 5);
  std::printf("[speed] Q8_0 GEMM 1500 tok x 64 -> 128: %.3f ms; GEMV 151936 x 64: %.3f ms (2 threads)\n", gemm, gemv);
  EXPECT_LT(gemm, 1000.0);
  EXPECT_LT(gemv, 1000.0);
}

}  // namespace
}  // namespace ds::cpu
