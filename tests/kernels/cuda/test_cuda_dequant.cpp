// Q8_0 -> bf16 dequantization of the prefill GEMM's weights: the v2 kernel (kernels/cuda/
// dequant_q8.cu, the default) and v1 (gemm_tc.cu) must both give the host's round-to-nearest-even
// of d * q, bit for bit (exact: no tolerance), on packed matrices with and without a tail of
// fewer than 32 blocks, and on layouts v2 does not take (padded rows, a 2-byte aligned base), which
// fall back to v1 (the GEMM's per-call dequantization always asks for v2). Split rows
// (GgmlType::Q8_0_SPLIT) give the same bits as the matrix in GGUF order. Skips without a GPU (the argument checks run
// without one).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/ggml_types.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matmul_fast.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

// rows of Q8_0 blocks, `row_bytes` apart (>= the packed size), after `lead` bytes of padding.
std::vector<uint8_t> random_q8_rows(size_t rows, size_t cols, size_t row_bytes, size_t lead, Rng& rng) {
  std::vector<uint8_t> bytes(lead + rows * row_bytes, 0xAB);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t b = 0; b < cols / 32; ++b) {
      uint8_t* blk = bytes.data() + lead + r * row_bytes + b * 34;
      const uint16_t d = fp32_to_fp16(rng.uniform(0.001f, 0.05f));
      std::memcpy(blk, &d, 2);
      for (size_t i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(rng.integer(-127, 127));
    }
  }
  return bytes;
}

struct DequantCase {
  size_t rows, cols, row_pad, lead;  // row_pad: bytes after each packed row; lead: base offset
};

class CudaDequant : public ::testing::TestWithParam<DequantCase> {};

TEST_P(CudaDequant, BothKernelsRoundLikeTheHost) {
  DS_REQUIRE_GPU();
  const DequantCase c = GetParam();
  Rng rng(60 + c.rows + c.cols + c.row_pad + c.lead);
  const size_t row_bytes = ggml_row_bytes(GgmlType::Q8_0, c.cols) + c.row_pad;
  const std::vector<uint8_t> bytes = random_q8_rows(c.rows, c.cols, row_bytes, c.lead, rng);
  std::vector<uint16_t> want(c.rows * c.cols);
  std::vector<float> wrow(c.cols);
  const cpu::WeightView host{GgmlType::Q8_0, bytes.data() + c.lead, c.rows, c.cols, row_bytes};
  for (size_t r = 0; r < c.rows; ++r) {
    cpu::weight_row(host, r, wrow.data());
    for (size_t i = 0; i < c.cols; ++i) want[r * c.cols + i] = fp32_to_bf16(wrow[i]);
  }
  DeviceArray<uint8_t> dw(bytes);
  const cpu::WeightView w{GgmlType::Q8_0, dw.get() + c.lead, c.rows, c.cols, row_bytes};
  for (bool v2 : {true, false}) {
    DeviceArray<uint16_t> out(c.rows * c.cols);
    out.upload(std::vector<uint16_t>(c.rows * c.cols, 0xFFFF));  // a NaN pattern: every element must be written
    DS_CUDA_CHECK(dequantize_q8_to_bf16(w, out.get(), nullptr, v2));
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = out.download();
    size_t bad = 0, first = 0;
    for (size_t e = 0; e < got.size(); ++e) {
      if (got[e] != want[e] && bad++ == 0) first = e;
    }
    EXPECT_EQ(bad, 0u) << (v2 ? "v2" : "v1") << ": first mismatch at " << first;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaDequant,
                         ::testing::Values(DequantCase{512, 4096, 0, 0},  // packed, whole groups (9B row length)
                                           DequantCase{64, 12288, 0, 0},  // ffn_down row length
                                           DequantCase{37, 160, 0, 0},    // 185 blocks: 5 groups + a 25-block tail
                                           DequantCase{3, 96, 0, 0},      // 9 blocks: tail only
                                           DequantCase{40, 256, 2, 0},    // padded rows: v1 only
                                           DequantCase{40, 256, 0, 2}));  // 2-byte aligned base: v1 only

// Split rows (GgmlType::Q8_0_SPLIT, common/q8_split.h): the same matrix uploaded in both layouts
// dequantizes to the same bf16 bits (the split kernel rounds d * q like v1 and v2; exact, no
// tolerance; the GGUF-order result is held to the host above). Row lengths of the 9B model's
// matrices and a row count that is not a multiple of anything the kernel uses.
TEST(CudaDequantSplit, SameBitsAsGgufOrder) {
  DS_REQUIRE_GPU();
  struct Shape {
    size_t rows, cols;
  };
  Rng rng(62);
  for (const Shape& s : {Shape{512, 4096}, Shape{37, 512}, Shape{3, 12288}}) {
    const size_t row_bytes = ggml_row_bytes(GgmlType::Q8_0, s.cols);
    const std::vector<uint8_t> bytes = random_q8_rows(s.rows, s.cols, row_bytes, 0, rng);
    DeviceArray<uint8_t> dq(bytes), dsplit(q8_split_copy(bytes.data(), s.rows, s.cols));
    DeviceArray<uint16_t> want(s.rows * s.cols), got(s.rows * s.cols);
    got.upload(std::vector<uint16_t>(s.rows * s.cols, 0xFFFF));  // every element must be written
    DS_CUDA_CHECK(dequantize_q8_to_bf16({GgmlType::Q8_0, dq.get(), s.rows, s.cols, row_bytes}, want.get(), nullptr));
    DS_CUDA_CHECK(
        dequantize_q8_to_bf16({GgmlType::Q8_0_SPLIT, dsplit.get(), s.rows, s.cols, row_bytes}, got.get(), nullptr));
    EXPECT_TRUE(same_bits(got.download(), want.download())) << s.rows << "x" << s.cols;
  }
}

TEST(CudaDequantSplitArgs, RefusesRowsItCannotLoad) {
  // Argument checks only: nothing reaches the device.
  alignas(16) uint8_t buf[2048] = {};
  alignas(16) uint16_t out[512] = {};
  EXPECT_EQ(dequantize_q8_to_bf16({GgmlType::Q8_0_SPLIT, buf + 2, 1, 512, 544}, out, nullptr),
            cudaErrorInvalidValue);  // split rows need a 16-byte aligned base
  EXPECT_EQ(dequantize_q8_to_bf16({GgmlType::Q8_0_SPLIT, buf, 2, 512, 552}, out, nullptr),
            cudaErrorInvalidValue);  // and a row stride of whole 16-byte pieces
  EXPECT_EQ(dequantize_q8_to_bf16({GgmlType::Q8_0_SPLIT, buf, 1, 512, 528}, out, nullptr),
            cudaErrorInvalidValue);  // shorter than the packed row
}

}  // namespace
}  // namespace ds::cuda::test
