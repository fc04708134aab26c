// Shared by the tests of the kernels over split-rows Q8_0 matrices (test_cuda_gemv_split.cpp:
// the GEMV and the bf16 small-batch GEMM): a random
// matrix in both layouts, and the check that a stacked product written to row segments equals
// the whole product's rows bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "common/ggml_types.h"
#include "common/q8_split.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/matmul.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {

struct SplitHost {
  size_t rows, cols, row_bytes;
  std::vector<uint8_t> gguf, split;  // the same matrix in both layouts
  cpu::WeightView gguf_view() const { return {GgmlType::Q8_0, gguf.data(), rows, cols, row_bytes}; }
  cpu::WeightView device_view(const void* base) const { return {GgmlType::Q8_0_SPLIT, base, rows, cols, row_bytes}; }
};

inline SplitHost make_split(size_t rows, size_t cols, Rng& rng) {
  SplitHost w{rows, cols, cols / 32 * 34, {}, {}};
  w.gguf.resize(rows * w.row_bytes);
  for (size_t b = 0; b < rows * cols / 32; ++b) {
    const uint16_t d = fp32_to_fp16(rng.uniform(0.001f, 0.05f));
    std::memcpy(&w.gguf[b * 34], &d, 2);
    for (size_t i = 0; i < 32; ++i) w.gguf[b * 34 + 2 + i] = static_cast<uint8_t>(rng.integer(-128, 127));
  }
  w.split.resize(w.gguf.size());
  q8_split_rows(w.gguf.data(), rows, cols, w.split.data());
  return w;
}

struct SplitShape {
  size_t rows, cols;
};

// The whole product of n tokens (x rows at stride cols, y rows at stride rows).
using WholeProduct = std::function<std::vector<float>(const SplitHost&, const DeviceArray<uint8_t>&,
                                                      const std::vector<float>& x, size_t n)>;
// The product to row segments: the kernel's `_rows` entry point (stream nullptr).
using RowsProduct = std::function<cudaError_t(const cpu::WeightView&, const float* x, size_t xs, size_t n,
                                              const RowSegments& out, bool dependent)>;

// For each shape and token count (default 5 / 24 / 64): three odd-sized segments equal the whole
// product's rows bit for bit; segment lists that miss a row, overlap token rows or are empty are
// refused (at the last token count).
inline void expect_row_segments_equal_whole(const std::vector<SplitShape>& shapes, const WholeProduct& whole_product,
                                            const RowsProduct& rows_product,
                                            const std::vector<size_t>& token_counts = {5, 24, 64}) {
  Rng rng(515);
  for (const SplitShape& s : shapes) {
    const SplitHost w = make_split(s.rows, s.cols, rng);
    DeviceArray<uint8_t> dw(w.split);
    for (size_t n : token_counts) {
      const std::vector<float> x = rng.vec(n * s.cols);
      const std::vector<float> whole = whole_product(w, dw, x, n);
      const size_t cut[4] = {0, s.rows / 2 + 3, s.rows - 64, s.rows};  // odd-sized segments
      DeviceArray<float> dx(x), d0(n * cut[1] + 5), d1(n * (cut[2] - cut[1])), d2(n * 64);
      RowSegments seg;
      seg.n = 3;
      float* ys[3] = {d0.get(), d1.get(), d2.get()};
      for (int i = 0; i < 3; ++i) {
        seg.first[i + 1] = cut[i + 1];
        seg.y[i] = ys[i];
        seg.ys[i] = cut[i + 1] - cut[i];
      }
      DS_CUDA_CHECK(rows_product(w.device_view(dw.get()), dx.get(), s.cols, n, seg, true));
      const std::vector<float> parts[3] = {d0.download(), d1.download(), d2.download()};
      for (int i = 0; i < 3; ++i) {
        const size_t rows_i = cut[i + 1] - cut[i];
        for (size_t t = 0; t < n; ++t) {
          ASSERT_EQ(
              std::memcmp(parts[i].data() + t * rows_i, whole.data() + t * s.rows + cut[i], rows_i * sizeof(float)), 0)
              << s.rows << "x" << s.cols << " n=" << n << " segment " << i << " token " << t;
        }
      }
    }
    const size_t nb = token_counts.back();
    DeviceArray<float> dx(nb * s.cols), dy(nb * s.rows);
    RowSegments bad = RowSegments::whole(dy.get(), s.rows - 1, s.rows);  // misses the last row
    EXPECT_EQ(rows_product(w.device_view(dw.get()), dx.get(), s.cols, nb, bad, false), cudaErrorInvalidValue);
    bad = RowSegments::whole(dy.get(), s.rows, s.rows - 1);  // token rows overlap
    EXPECT_EQ(rows_product(w.device_view(dw.get()), dx.get(), s.cols, nb, bad, false), cudaErrorInvalidValue);
    bad = RowSegments::whole(dy.get(), s.rows, s.rows);
    bad.n = 0;
    EXPECT_EQ(rows_product(w.device_view(dw.get()), dx.get(), s.cols, nb, bad, false), cudaErrorInvalidValue);
  }
  DS_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace ds::cuda::test
