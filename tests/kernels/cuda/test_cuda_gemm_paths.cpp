// The prefill GEMM paths of issue 9 (kernels/cuda/gemm_cublas.*, gemm_tc.cu) against the CPU:
// cuBLASLt on per-call dequantized weights (the default), cuBLASLt and mma.sync on a persistent
// bf16 weight copy, and the public matmul with its default options. Skips without a GPU.
//
// Tolerance (same reasoning and numbers as the tensor-core case of test_cuda_matmul.cpp): each
// weight d*q and each activation is rounded to bf16 (relative error <= 2^-9 each) before an
// f32-accumulated product, so |err| <= (2^-8 + 2^-18) sum|w_i x_i| + f32 accumulation; we allow
// 4e-3 * sum|w_i x_i| per element and an RMS error below 2e-3 of the RMS of sum|w x|.
// Across paths the operands are the same bf16 values, so cuBLASLt and mma.sync may differ only in
// f32 summation order: held to the f32 bound of test_cuda_matmul.cpp, 2e-6 * sum|w_i x_i| (a
// path that used bf16/tf32 accumulation or different operands would miss it by orders).
// The persistent copy must equal the host's round-to-nearest-even of d*q bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "common/ggml_types.h"
#include "common/q8_split.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matmul_fast.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

struct GemmCase {
  size_t rows, cols, n_tokens, x_pad, y_pad, y_offset;  // y_offset floats: a less aligned y
};

std::vector<uint8_t> random_q8(size_t rows, size_t cols, Rng& rng) {
  const size_t row_bytes = ggml_row_bytes(GgmlType::Q8_0, cols);
  std::vector<uint8_t> bytes(rows * row_bytes);
  for (size_t b = 0; b < rows * cols / 32; ++b) {
    uint8_t* blk = bytes.data() + b * 34;
    const uint16_t d = fp32_to_fp16(rng.uniform(0.001f, 0.05f));
    std::memcpy(blk, &d, 2);
    for (size_t i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(rng.integer(-127, 127));
  }
  return bytes;
}

enum class Path { kLtPerCall, kLtPersistent, kMmaPersistent, kPublicDefault };

const char* path_name(Path p) {
  switch (p) {
    case Path::kLtPerCall:
      return "cuBLASLt, per-call dequant";
    case Path::kLtPersistent:
      return "cuBLASLt, persistent bf16";
    case Path::kMmaPersistent:
      return "mma.sync, persistent bf16";
    case Path::kPublicDefault:
      return "public matmul, default options";
  }
  return "?";
}

std::string gemm_case_name(const ::testing::TestParamInfo<GemmCase>& info) {
  const GemmCase& c = info.param;
  return "r" + std::to_string(c.rows) + "_c" + std::to_string(c.cols) + "_t" + std::to_string(c.n_tokens) + "_yo" +
         std::to_string(c.y_offset);
}

class CudaGemmPaths : public ::testing::TestWithParam<GemmCase> {};

TEST_P(CudaGemmPaths, MatchCpuAndEachOther) {
  DS_REQUIRE_GPU();
  const GemmCase c = GetParam();
  Rng rng(300 + c.rows + c.cols + c.n_tokens);
  const std::vector<uint8_t> wbytes = random_q8(c.rows, c.cols, rng);
  const size_t row_bytes = ggml_row_bytes(GgmlType::Q8_0, c.cols);
  const cpu::WeightView host_w{GgmlType::Q8_0, wbytes.data(), c.rows, c.cols, row_bytes};
  const size_t xs = c.cols + c.x_pad, ys = c.rows + c.y_pad;
  const std::vector<float> x = rng.vec(c.n_tokens * xs);
  std::vector<float> want(c.n_tokens * ys);
  cpu::matmul(host_w, x.data(), xs, c.n_tokens, want.data(), ys, nullptr);

  DeviceArray<uint8_t> dw(wbytes);
  DeviceArray<uint16_t> dbf16(c.rows * c.cols);
  const cpu::WeightView w{GgmlType::Q8_0, dw.get(), c.rows, c.cols, row_bytes};
  DS_CUDA_CHECK(dequantize_q8_to_bf16(w, dbf16.get(), nullptr));
  DeviceArray<float> dx(x), dy(c.y_offset + want.size());

  std::vector<float> wrow(c.cols), abs_sum(c.n_tokens * c.rows);
  for (size_t r = 0; r < c.rows; ++r) {
    cpu::weight_row(host_w, r, wrow.data());
    for (size_t t = 0; t < c.n_tokens; ++t) {
      double s = 0;
      for (size_t i = 0; i < c.cols; ++i) s += std::fabs(static_cast<double>(wrow[i]) * x[t * xs + i]);
      abs_sum[t * c.rows + r] = static_cast<float>(s);
    }
  }

  std::vector<std::vector<float>> results;
  for (Path p : {Path::kLtPerCall, Path::kLtPersistent, Path::kMmaPersistent, Path::kPublicDefault}) {
    SCOPED_TRACE(path_name(p));
    dy.upload(std::vector<float>(dy.size(), 7.0f));  // padding must survive
    float* y = dy.get() + c.y_offset;
    const TcGemmOptions lt{.kernel = TcGemmKernel::kCublasLt, .bf16_weights = nullptr};
    const TcGemmOptions lt_copy{.kernel = TcGemmKernel::kCublasLt, .bf16_weights = dbf16.get()};
    const TcGemmOptions mma_copy{.kernel = TcGemmKernel::kMmaSync, .bf16_weights = dbf16.get()};
    if (p == Path::kPublicDefault) {
      DS_CUDA_CHECK(matmul(w, dx.get(), xs, c.n_tokens, y, ys, MatmulPrecision::kBf16TensorCores, nullptr));
    } else {
      const TcGemmOptions& o = p == Path::kLtPerCall ? lt : p == Path::kLtPersistent ? lt_copy : mma_copy;
      DS_CUDA_CHECK(detail::gemm_q8_tc(w, dx.get(), xs, c.n_tokens, y, ys, o, nullptr));
    }
    const std::vector<float> all = dy.download();
    const std::vector<float> got(all.begin() + static_cast<std::ptrdiff_t>(c.y_offset), all.end());
    double worst = 0, err2 = 0, abs2 = 0;
    for (size_t t = 0; t < c.n_tokens; ++t) {
      for (size_t r = 0; r < c.rows; ++r) {
        const double a = abs_sum[t * c.rows + r], err = std::fabs(double{got[t * ys + r]} - want[t * ys + r]);
        worst = std::max(worst, err / (4e-3 * a + 1e-30));
        err2 += err * err;
        abs2 += a * a;
      }
      for (size_t r = c.rows; r < ys; ++r) ASSERT_EQ(got[t * ys + r], 7.0f) << "padding overwritten";
    }
    EXPECT_LE(worst, 1.0) << "worst error as a fraction of the allowed bf16 bound";
    EXPECT_LE(std::sqrt(err2 / abs2), 2e-3) << "typical bf16 error too large";
    results.push_back(got);
  }
  // Same bf16 operands on every path: only the f32 summation order may differ.
  for (size_t i = 1; i < results.size(); ++i) {
    double worst = 0;
    for (size_t t = 0; t < c.n_tokens; ++t) {
      for (size_t r = 0; r < c.rows; ++r) {
        const double d = std::fabs(double{results[i][t * ys + r]} - results[0][t * ys + r]);
        worst = std::max(worst, d / (2e-6 * abs_sum[t * c.rows + r] + 1e-30));
      }
    }
    EXPECT_LE(worst, 1.0) << "path " << i << " vs cuBLASLt per-call: beyond f32 reordering";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemmPaths,
                         ::testing::Values(
                             // The smallest tensor-core batch; odd rows; padded strides; y only 4-byte aligned
                             // (cuBLASLt must pick an algorithm for that alignment or the mma fallback must take it).
                             GemmCase{1, 32, 16, 0, 0, 0}, GemmCase{300, 4096, 17, 3, 7, 1},
                             GemmCase{129, 352, 200, 1, 0, 0}, GemmCase{512, 2048, 256, 0, 0, 0},
                             GemmCase{1000, 1024, 67, 0, 3, 3}, GemmCase{64, 12288, 33, 0, 0, 2}),
                         gemm_case_name);

// A stacked matrix's prefill product to row segments (matmul_rows: the activations rounded to bf16
// once for all segments) gives every segment the bits of its own matmul, in GGUF order and split
// rows, per-call dequantization and a persistent copy of the whole stack; the outputs' padding
// survives. Segment sizes like the 9B GDN stack [qkv | z | alpha|beta], scaled down.
TEST(CudaGemmPaths, StackedRowsEqualSeparateProducts) {
  DS_REQUIRE_GPU();
  const size_t cols = 1024, n = 130, seg_rows[3] = {512, 256, 64}, rows = 832, pad = 5;
  Rng rng(41);
  const std::vector<uint8_t> gguf = random_q8(rows, cols, rng);
  std::vector<uint8_t> split(gguf.size());
  q8_split_rows(gguf.data(), rows, cols, split.data());
  const std::vector<float> x = rng.vec(n * (cols + 3));
  DeviceArray<float> dx(x);
  for (const GgmlType type : {GgmlType::Q8_0, GgmlType::Q8_0_SPLIT}) {
    DeviceArray<uint8_t> dw(type == GgmlType::Q8_0 ? gguf : split);
    const cpu::WeightView w{type, dw.get(), rows, cols, ggml_row_bytes(GgmlType::Q8_0, cols)};
    DeviceArray<uint16_t> dbf16(rows * cols);
    DS_CUDA_CHECK(dequantize_q8_to_bf16(w, dbf16.get(), nullptr));
    for (const void* copy : {static_cast<const void*>(nullptr), static_cast<const void*>(dbf16.get())}) {
      SCOPED_TRACE(std::string(type == GgmlType::Q8_0 ? "gguf order" : "split rows") + (copy ? ", copy" : ""));
      TcGemmOptions tc;
      tc.bf16_weights = copy;
      RowSegments out;
      out.n = 3;
      std::vector<std::unique_ptr<DeviceArray<float>>> stacked, separate;
      for (int i = 0; i < 3; ++i) {
        const size_t ys = seg_rows[i] + pad;
        stacked.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(n * ys, 7.0f)));
        separate.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(n * ys, 7.0f)));
        out.first[i + 1] = out.first[i] + seg_rows[i];
        out.y[i] = stacked.back()->get();
        out.ys[i] = ys;
      }
      DS_CUDA_CHECK(matmul_rows(w, dx.get(), cols + 3, n, out, MatmulPrecision::kBf16TensorCores, tc, nullptr));
      for (int i = 0; i < 3; ++i) {
        TcGemmOptions part = tc;
        if (copy != nullptr) part.bf16_weights = dbf16.get() + out.first[i] * cols;
        DS_CUDA_CHECK(matmul(cpu::row_range(w, out.first[i], seg_rows[i]), dx.get(), cols + 3, n, separate[i]->get(),
                             out.ys[i], MatmulPrecision::kBf16TensorCores, part, nullptr));
        const std::vector<float> a = stacked[i]->download(), b = separate[i]->download();
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "segment " << i;
        for (size_t t = 0; t < n; ++t) ASSERT_EQ(a[t * out.ys[i] + seg_rows[i]], 7.0f) << "padding overwritten";
      }
    }
  }
}

TEST(CudaGemmPaths, PersistentCopyIsRoundedDequantization) {
  DS_REQUIRE_GPU();
  Rng rng(17);
  const size_t rows = 37, cols = 160;
  const std::vector<uint8_t> wbytes = random_q8(rows, cols, rng);
  const size_t row_bytes = ggml_row_bytes(GgmlType::Q8_0, cols);
  DeviceArray<uint8_t> dw(wbytes);
  DeviceArray<uint16_t> dbf16(rows * cols);
  DS_CUDA_CHECK(dequantize_q8_to_bf16({GgmlType::Q8_0, dw.get(), rows, cols, row_bytes}, dbf16.get(), nullptr));
  const std::vector<uint16_t> got = dbf16.download();
  std::vector<float> wrow(cols);
  for (size_t r = 0; r < rows; ++r) {
    cpu::weight_row({GgmlType::Q8_0, wbytes.data(), rows, cols, row_bytes}, r, wrow.data());
    for (size_t c = 0; c < cols; ++c) ASSERT_EQ(got[r * cols + c], fp32_to_bf16(wrow[c])) << r << "," << c;
  }
}

TEST(CudaGemmPathsArgs, DequantizeRejectsBadInput) {
  // Argument checks only: nothing reaches the device, so these run without a GPU too.
  alignas(16) uint8_t buf[256] = {};
  const cpu::WeightView f16{GgmlType::F16, buf, 1, 32, 64};
  EXPECT_EQ(dequantize_q8_to_bf16(f16, buf, nullptr), cudaErrorNotSupported);
  const cpu::WeightView q8{GgmlType::Q8_0, buf, 1, 32, 34};
  EXPECT_EQ(dequantize_q8_to_bf16(q8, buf + 2, nullptr), cudaErrorInvalidValue);  // out not 16-byte aligned
  EXPECT_EQ(dequantize_q8_to_bf16(q8, nullptr, nullptr), cudaErrorInvalidValue);
  const cpu::WeightView q8_short{GgmlType::Q8_0, buf, 1, 32, 30};  // row shorter than one block
  EXPECT_EQ(dequantize_q8_to_bf16(q8_short, buf, nullptr), cudaErrorInvalidValue);
  const cpu::WeightView q8_odd{GgmlType::Q8_0, buf, 1, 40, 36};
  EXPECT_EQ(dequantize_q8_to_bf16(q8_odd, buf, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ds::cuda::test
