// swiglu_matmul (kernels/cuda/swiglu_matmul.h): the prefill FFN's SwiGLU rounded straight into
// the down projection's bf16 operand must give exactly (bit for bit: same f32 expression, same
// rounding, same GEMM) what swiglu followed by the bf16 tensor-core matmul gives, with cuBLASLt
// and mma.sync, per-call dequantization and a persistent bf16 copy, a padded y stride; give the
// same bits for split rows (GgmlType::Q8_0_SPLIT); and refuse what it does not take. Skips
// without a GPU (the argument checks run without one).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/ggml_types.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/swiglu_matmul.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

std::vector<uint8_t> random_q8_matrix(size_t rows, size_t cols, Rng& rng) {
  std::vector<uint8_t> bytes(rows * ggml_row_bytes(GgmlType::Q8_0, cols));
  for (size_t b = 0; b < rows * cols / 32; ++b) {
    uint8_t* blk = bytes.data() + b * 34;
    const uint16_t d = fp32_to_fp16(rng.uniform(0.001f, 0.05f));
    std::memcpy(blk, &d, 2);
    for (size_t i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(rng.integer(-127, 127));
  }
  return bytes;
}

TEST(CudaSwigluMatmul, EqualsSwigluThenMatmulBitForBit) {
  DS_REQUIRE_GPU();
  Rng rng(91);
  const size_t rows = 320, F = 1536, n = 70, ys = rows + 5;
  const std::vector<uint8_t> wbytes = random_q8_matrix(rows, F, rng);
  DeviceArray<uint8_t> dw(wbytes);
  const WeightView w{GgmlType::Q8_0, dw.get(), rows, F, ggml_row_bytes(GgmlType::Q8_0, F)};
  DeviceArray<uint16_t> copy(rows * F);
  DS_CUDA_CHECK(dequantize_q8_to_bf16(w, copy.get(), nullptr));
  DeviceArray<float> gate(rng.vec(n * F, -4.0f, 4.0f)), up(rng.vec(n * F)), act(n * F);
  DS_CUDA_CHECK(swiglu(gate.get(), up.get(), n * F, act.get(), nullptr));
  for (TcGemmKernel kernel : {TcGemmKernel::kCublasLt, TcGemmKernel::kMmaSync}) {
    for (const void* persistent : {static_cast<const void*>(nullptr), static_cast<const void*>(copy.get())}) {
      const TcGemmOptions tc{.kernel = kernel, .bf16_weights = persistent};
      DeviceArray<float> want(n * ys), got(n * ys);
      want.upload(std::vector<float>(n * ys, 3.0f));  // the padding must survive in both
      got.upload(std::vector<float>(n * ys, 3.0f));
      DS_CUDA_CHECK(matmul(w, act.get(), F, n, want.get(), ys, MatmulPrecision::kBf16TensorCores, tc, nullptr));
      DS_CUDA_CHECK(swiglu_matmul(w, gate.get(), up.get(), n, got.get(), ys, tc, nullptr));
      EXPECT_EQ(got.download(), want.download())
          << (kernel == TcGemmKernel::kCublasLt ? "cuBLASLt" : "mma.sync") << (persistent ? ", persistent" : "");
    }
  }
}

// Split rows (GgmlType::Q8_0_SPLIT): per-call dequantization of the split matrix feeds the same
// bf16 operand, so y is the GGUF-order y bit for bit, with either GEMM.
TEST(CudaSwigluMatmul, SplitRowsGiveTheSameBits) {
  DS_REQUIRE_GPU();
  Rng rng(92);
  const size_t rows = 320, F = 1536, n = 70, ys = rows + 5, row_bytes = ggml_row_bytes(GgmlType::Q8_0, F);
  const std::vector<uint8_t> wbytes = random_q8_matrix(rows, F, rng);
  DeviceArray<uint8_t> dq(wbytes), dsplit(q8_split_copy(wbytes.data(), rows, F));
  const WeightView q8{GgmlType::Q8_0, dq.get(), rows, F, row_bytes};
  const WeightView split{GgmlType::Q8_0_SPLIT, dsplit.get(), rows, F, row_bytes};
  ASSERT_TRUE(swiglu_matmul_applies(split, n));
  DeviceArray<float> gate(rng.vec(n * F, -4.0f, 4.0f)), up(rng.vec(n * F));
  for (TcGemmKernel kernel : {TcGemmKernel::kCublasLt, TcGemmKernel::kMmaSync}) {
    const TcGemmOptions tc{.kernel = kernel, .bf16_weights = nullptr};
    DeviceArray<float> want(n * ys), got(n * ys);
    DS_CUDA_CHECK(swiglu_matmul(q8, gate.get(), up.get(), n, want.get(), ys, tc, nullptr));
    DS_CUDA_CHECK(swiglu_matmul(split, gate.get(), up.get(), n, got.get(), ys, tc, nullptr));
    EXPECT_TRUE(same_bits(got.download(), want.download()))
        << (kernel == TcGemmKernel::kCublasLt ? "cuBLASLt" : "mma.sync");
  }
}

TEST(CudaSwigluMatmulArgs, RefusesWhatItDoesNotTake) {
  // Argument checks only: nothing reaches the device.
  alignas(16) uint8_t buf[4096] = {};
  auto* f = reinterpret_cast<float*>(buf);
  const WeightView q8{GgmlType::Q8_0, buf, 4, 64, 68};
  EXPECT_FALSE(swiglu_matmul_applies(q8, kTcMinTokens - 1));  // decode-sized: the two ops
  EXPECT_EQ(swiglu_matmul(q8, f, f, kTcMinTokens - 1, f, 4, {}, nullptr), cudaErrorNotSupported);
  const WeightView f32{GgmlType::F32, buf, 4, 64, 256};
  EXPECT_EQ(swiglu_matmul(f32, f, f, 64, f, 4, {}, nullptr), cudaErrorNotSupported);
  EXPECT_EQ(swiglu_matmul(q8, nullptr, f, 64, f, 4, {}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(swiglu_matmul(q8, f, f, 64, f, 3, {}, nullptr), cudaErrorInvalidValue);  // y stride < rows
  EXPECT_EQ(swiglu_matmul(q8, reinterpret_cast<float*>(buf + 2), f, 64, f, 4, {}, nullptr), cudaErrorMisalignedAddress);
  const WeightView split_shifted{GgmlType::Q8_0_SPLIT, buf + 2, 1, 512, 544};  // split rows: 16-byte aligned
  EXPECT_FALSE(swiglu_matmul_applies(split_shifted, 64));
  EXPECT_EQ(swiglu_matmul(split_shifted, f, f, 64, f, 4, {}, nullptr), cudaErrorNotSupported);
}

}  // namespace
}  // namespace ds::cuda::test
