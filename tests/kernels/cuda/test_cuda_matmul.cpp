// CUDA matmul / embedding / row gather against kernels/cpu on every weight type, with odd row
// counts and widths, token counts on both sides of the GEMV/GEMM switch, padded strides, and
// weight rows that are only 2-byte aligned. Q8_0 matrices in the split device layout
// (GgmlType::Q8_0_SPLIT) must give bit-identical outputs to the same matrix in GGUF order on every
// path but the split decode GEMV (its own test): the same kernels see the same weights d * q and
// add in the same order, so any difference is a bug (no tolerance).
//
// Tolerance: both sides see bit-identical dequantized weights and accumulate in f32, in different
// orders. Each result is within ~n*u*sum|w_i x_i| of the exact dot product (u = 2^-24), and the
// observed error is far smaller (random-walk ~ sqrt(n)*u*|y|), so we allow 2e-6 * sum|w_i x_i| per
// element (about 34 u of the absolute-value sum). The Q8_0 streaming GEMV (n_tokens <= 8) is f32
// math too and is held to the same bound.
// Every case runs through the public cuda::matmul (default: f32-exact paths, the bound above) and,
// where the opt-in tensor-core GEMM applies (Q8_0, n_tokens >= kTcMinTokens), through that GEMM
// directly, with a tolerance loosened on purpose: it runs on bf16 tensor cores —
// each weight d*q and each activation is rounded to bf16 (relative error <= 2^-9 each) before an
// f32-accumulated product, so |err| <= (2^-8 + 2^-18) sum|w_i x_i| + f32 accumulation; we allow
// 4e-3 * sum|w_i x_i| (the worst-case bound, slightly rounded up) and also require the typical
// error (RMS over the output) to stay below 2e-3 of the RMS of sum|w x| (random-walk level ~3e-4).
#include <gtest/gtest.h>

#include <cstring>

#include "common/ggml_types.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matmul_fast.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

// Random weight bytes of a GGUF type, `offset` bytes into the buffer (to test misaligned rows).
struct HostWeight {
  GgmlType type;
  size_t rows, cols, row_bytes, offset;
  std::vector<uint8_t> bytes;
  cpu::WeightView view(const void* base) const {
    return {type, static_cast<const uint8_t*>(base) + offset, rows, cols, row_bytes};
  }
};

HostWeight make_weight(GgmlType type, size_t rows, size_t cols, size_t offset, Rng& rng) {
  HostWeight w{type, rows, cols, ggml_row_bytes(type, cols), offset, {}};
  w.bytes.resize(offset + rows * w.row_bytes);
  uint8_t* p = w.bytes.data() + offset;
  for (size_t r = 0; r < rows; ++r) {
    uint8_t* row = p + r * w.row_bytes;
    if (type == GgmlType::Q8_0) {
      for (size_t b = 0; b < cols / 32; ++b) {
        const uint16_t d = fp32_to_fp16(rng.uniform(0.001f, 0.05f));
        std::memcpy(row + b * 34, &d, 2);
        for (size_t i = 0; i < 32; ++i) row[b * 34 + 2 + i] = static_cast<uint8_t>(rng.integer(-127, 127));
      }
      continue;
    }
    for (size_t c = 0; c < cols; ++c) {
      const float f = rng.uniform(-1, 1);
      if (type == GgmlType::F32) {
        std::memcpy(row + 4 * c, &f, 4);
      } else {
        const uint16_t h = type == GgmlType::F16 ? fp32_to_fp16(f) : fp32_to_bf16(f);
        std::memcpy(row + 2 * c, &h, 2);
      }
    }
  }
  return w;
}

struct MatmulCase {
  GgmlType type;
  size_t rows, cols, n_tokens, x_pad, y_pad, offset;
};

// A descriptor of the case's shape (no data): enough to ask which path applies.
cpu::WeightView w_view_of(const MatmulCase& c) {
  return {c.type, nullptr, c.rows, c.cols, ggml_row_bytes(c.type, c.cols)};
}

std::string case_name(const ::testing::TestParamInfo<MatmulCase>& info) {
  const MatmulCase& c = info.param;
  return std::string(ggml_type_name(c.type)) + "_r" + std::to_string(c.rows) + "_c" + std::to_string(c.cols) + "_t" +
         std::to_string(c.n_tokens) + "_o" + std::to_string(c.offset) + "_" + std::to_string(info.index);
}

class CudaMatmul : public ::testing::TestWithParam<MatmulCase> {};

// Which implementation check_case runs: the public matmul, the bf16 GEMM, or one GEMV variant.
enum class Path { kPublic, kBf16, kGemvVariant };

void check_case(const MatmulCase& c, Path path, int variant = 0) {
  const bool bf16_path = path == Path::kBf16;
  Rng rng(100 + c.rows + c.cols + c.n_tokens);
  const HostWeight w = make_weight(c.type, c.rows, c.cols, c.offset, rng);
  const size_t xs = c.cols + c.x_pad, ys = c.rows + c.y_pad;
  const std::vector<float> x = rng.vec(c.n_tokens * xs);
  std::vector<float> want(c.n_tokens * ys, 7.0f);
  cpu::matmul(w.view(w.bytes.data()), x.data(), xs, c.n_tokens, want.data(), ys, nullptr);

  DeviceArray<uint8_t> dw(w.bytes);
  DeviceArray<float> dx(x), dy(want.size());
  dy.upload(std::vector<float>(want.size(), 7.0f));  // padding must survive
  if (bf16_path) {
    DS_CUDA_CHECK(detail::gemm_q8_tc(w.view(dw.get()), dx.get(), xs, c.n_tokens, dy.get(), ys, nullptr));
  } else if (path == Path::kGemvVariant) {
    DS_CUDA_CHECK(detail::gemv_q8_variant(variant, w.view(dw.get()), dx.get(), xs, c.n_tokens, dy.get(), ys, nullptr));
  } else {
    DS_CUDA_CHECK(cuda::matmul(w.view(dw.get()), dx.get(), xs, c.n_tokens, dy.get(), ys, nullptr));
  }
  const std::vector<float> got = dy.download();

  const double tol = bf16_path ? 4e-3 : 2e-6;
  std::vector<float> wrow(c.cols);
  double worst = 0;  // error / allowed, over all elements
  double err2 = 0, abs2 = 0;
  for (size_t r = 0; r < c.rows; ++r) {
    cpu::weight_row(w.view(w.bytes.data()), r, wrow.data());
    for (size_t t = 0; t < c.n_tokens; ++t) {
      double abs_sum = 0;
      for (size_t i = 0; i < c.cols; ++i) abs_sum += std::fabs(static_cast<double>(wrow[i]) * x[t * xs + i]);
      const double err = std::fabs(static_cast<double>(got[t * ys + r]) - want[t * ys + r]);
      worst = std::max(worst, err / (tol * abs_sum + 1e-30));
      err2 += err * err;
      abs2 += abs_sum * abs_sum;
    }
  }
  EXPECT_LE(worst, 1.0) << "worst error as a fraction of the allowed bound" << (bf16_path ? " (bf16 GEMM)" : "")
                        << (path == Path::kGemvVariant ? " (GEMV variant " + std::to_string(variant) + ")" : "");
  if (bf16_path) {
    EXPECT_LE(std::sqrt(err2 / abs2), 2e-3) << "typical bf16 error too large";
  }
  for (size_t t = 0; t < c.n_tokens; ++t) {
    for (size_t r = c.rows; r < ys; ++r) ASSERT_EQ(got[t * ys + r], 7.0f) << "padding overwritten";
  }
}

TEST_P(CudaMatmul, MatchesCpu) {
  DS_REQUIRE_GPU();
  const MatmulCase c = GetParam();
  check_case(c, Path::kPublic);
  if (detail::gemm_q8_tc_applies(w_view_of(c), c.n_tokens)) check_case(c, Path::kBf16);
  // Both GEMV launch shapes gemv_q8 uses (the lab holds the others), same f32 bound.
  // Applicability here ignores pointer alignment: the cases' offsets are what defeat it.
  if (c.type == GgmlType::Q8_0 && c.offset == 0 && c.n_tokens <= kGemvMaxTokens && c.cols % 128 == 0 &&
      (c.n_tokens == 1 || (c.cols + c.x_pad) % 4 == 0)) {
    for (int v = 0; v < detail::kGemvVariants; ++v) check_case(c, Path::kGemvVariant, v);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, CudaMatmul,
    ::testing::Values(
        // Q8_0: widths are multiples of 32.
        MatmulCase{GgmlType::Q8_0, 77, 96, 1, 0, 0, 0}, MatmulCase{GgmlType::Q8_0, 64, 64, 3, 5, 3, 0},
        MatmulCase{GgmlType::Q8_0, 131, 1024, 8, 0, 1, 0}, MatmulCase{GgmlType::Q8_0, 200, 160, 9, 3, 0, 2},
        MatmulCase{GgmlType::Q8_0, 257, 4096, 70, 0, 0, 0}, MatmulCase{GgmlType::Q8_0, 3, 32, 130, 1, 1, 0},
        // Q8_0 fast paths: streaming GEMV (cols % 128 == 0, aligned x; 8-byte aligned rows), partial
        // pieces (cols not a multiple of 4096), rows not a multiple of the 8 rows of a block.
        MatmulCase{GgmlType::Q8_0, 1001, 4096, 1, 0, 0, 0}, MatmulCase{GgmlType::Q8_0, 333, 12288, 1, 0, 0, 0},
        MatmulCase{GgmlType::Q8_0, 77, 4224, 2, 4, 0, 0}, MatmulCase{GgmlType::Q8_0, 130, 640, 3, 0, 5, 0},
        MatmulCase{GgmlType::Q8_0, 65, 4352, 5, 4, 0, 0}, MatmulCase{GgmlType::Q8_0, 259, 8192, 8, 8, 2, 0},
        // GEMV v2 (a lane per row, 32 rows a block, 8 warps over the quads): fewer rows than a
        // block, fewer quads than warps, rows past a block edge, every token count.
        MatmulCase{GgmlType::Q8_0, 32, 4096, 1, 0, 0, 0}, MatmulCase{GgmlType::Q8_0, 5, 128, 8, 0, 0, 0},
        MatmulCase{GgmlType::Q8_0, 4099, 256, 3, 0, 0, 0}, MatmulCase{GgmlType::Q8_0, 97, 1152, 6, 4, 3, 0},
        MatmulCase{GgmlType::Q8_0, 33, 384, 7, 0, 0, 0},
        MatmulCase{GgmlType::Q8_0, 40, 1024, 4, 1, 0, 0},  // x stride not a multiple of 4: old GEMV
        MatmulCase{GgmlType::Q8_0, 40, 1024, 1, 0, 0, 2},  // rows only 2-byte aligned: old GEMV
        // Q8_0 tensor-core GEMM: edges in M and N, padded strides, more than one K tile per stage
        // ring, and a weight chunk boundary is exercised by the model-sized case in the lab.
        MatmulCase{GgmlType::Q8_0, 1, 32, 16, 0, 0, 0}, MatmulCase{GgmlType::Q8_0, 300, 4096, 17, 3, 7, 2},
        MatmulCase{GgmlType::Q8_0, 129, 352, 200, 1, 0, 0}, MatmulCase{GgmlType::Q8_0, 512, 2048, 256, 0, 0, 0},
        MatmulCase{GgmlType::Q8_0, 64, 96, 15, 0, 0, 0},  // just below the switch: SIMT GEMM
        // F16 / BF16 / F32: odd widths (vector + scalar tail), 2-byte offsets defeat 16-byte loads.
        MatmulCase{GgmlType::F16, 33, 45, 1, 0, 0, 0}, MatmulCase{GgmlType::F16, 65, 1000, 4, 2, 0, 2},
        MatmulCase{GgmlType::F16, 129, 263, 37, 1, 2, 0}, MatmulCase{GgmlType::BF16, 31, 7, 2, 0, 0, 2},
        MatmulCase{GgmlType::BF16, 100, 512, 8, 0, 0, 0}, MatmulCase{GgmlType::BF16, 70, 300, 100, 4, 4, 2},
        MatmulCase{GgmlType::F32, 17, 19, 1, 1, 1, 0}, MatmulCase{GgmlType::F32, 90, 256, 5, 0, 0, 4},
        MatmulCase{GgmlType::F32, 65, 129, 65, 3, 0, 0}),
    case_name);

TEST(CudaMatmulArgs, RejectsUnsupportedTypeAndBadShapes) {
  // Pure argument checks: nothing reaches the device, so these run without a GPU too.
  float dummy[64] = {};
  const cpu::WeightView q4{GgmlType::Q4_K, dummy, 1, 256, 144};
  EXPECT_EQ(cuda::matmul(q4, dummy, 256, 1, dummy, 1, nullptr), cudaErrorNotSupported);
  const cpu::WeightView q8_odd{GgmlType::Q8_0, dummy, 1, 33, 36};
  EXPECT_EQ(cuda::matmul(q8_odd, dummy, 33, 1, dummy, 1, nullptr), cudaErrorInvalidValue);
  const cpu::WeightView f32{GgmlType::F32, dummy, 4, 8, 32};
  EXPECT_EQ(cuda::matmul(f32, dummy, 4, 2, dummy, 4, nullptr), cudaErrorInvalidValue);  // x stride < cols
  const auto* odd = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(dummy) + 1);
  EXPECT_EQ(cuda::matmul(f32, odd, 8, 1, dummy, 4, nullptr), cudaErrorMisalignedAddress);
  EXPECT_EQ(cuda::matmul(f32, dummy, 8, 0, dummy, 4, nullptr), cudaSuccess);  // nothing to do
}

// ---- Q8_0 split rows (GgmlType::Q8_0_SPLIT) -----------------------------------------------------

struct SplitCase {
  size_t rows, cols, n_tokens;
  size_t x_offset;  // floats: 1 keeps x off 16 bytes, so decode batches take the SIMT GEMV, not gemv_q8(_split)
  MatmulPrecision precision;
  TcGemmKernel kernel;
};

class CudaMatmulSplit : public ::testing::TestWithParam<SplitCase> {};

TEST_P(CudaMatmulSplit, SameBitsAsGgufOrder) {
  DS_REQUIRE_GPU();
  const SplitCase c = GetParam();
  Rng rng(300 + c.rows + c.cols + c.n_tokens);
  const HostWeight w = make_weight(GgmlType::Q8_0, c.rows, c.cols, 0, rng);
  DeviceArray<uint8_t> dq(w.bytes), dsplit(q8_split_copy(w.bytes.data(), c.rows, c.cols));
  const cpu::WeightView split{GgmlType::Q8_0_SPLIT, dsplit.get(), c.rows, c.cols, w.row_bytes};
  const size_t xs = c.cols + 4, ys = c.rows + 3;
  DeviceArray<float> dx(rng.vec(c.x_offset + c.n_tokens * xs));
  const float* x = dx.get() + c.x_offset;
  // The split decode GEMV must not be what runs here (it sums in another order).
  ASSERT_FALSE(detail::gemv_q8_split_applies(split, x, xs, c.n_tokens));
  // split_small off: the small-batch GEMM over split rows (5..64 tokens, bf16 mode) has no
  // GGUF-order twin; test_cuda_gemv_split.cpp covers it.
  const TcGemmOptions tc{.kernel = c.kernel, .split_small = false};
  std::vector<float> out[2];
  const cpu::WeightView views[2] = {w.view(dq.get()), split};
  for (int i = 0; i < 2; ++i) {
    DeviceArray<float> dy(c.n_tokens * ys);
    dy.upload(std::vector<float>(c.n_tokens * ys, 7.0f));  // padding must survive
    DS_CUDA_CHECK(cuda::matmul(views[i], x, xs, c.n_tokens, dy.get(), ys, c.precision, tc, nullptr));
    out[i] = dy.download();
  }
  ASSERT_NE(out[0][0], 7.0f) << "the GGUF-order product did not run";
  EXPECT_TRUE(same_bits(out[1], out[0]));
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaMatmulSplit,
                         ::testing::Values(
                             // SIMT GEMV (1, 2..4, 5..8 tokens) and SIMT GEMM (f32).
                             SplitCase{131, 512, 1, 1, MatmulPrecision::kF32, TcGemmKernel::kCublasLt},
                             SplitCase{77, 1024, 3, 1, MatmulPrecision::kF32, TcGemmKernel::kCublasLt},
                             SplitCase{200, 512, 8, 1, MatmulPrecision::kF32, TcGemmKernel::kCublasLt},
                             SplitCase{65, 1536, 9, 0, MatmulPrecision::kF32, TcGemmKernel::kCublasLt},
                             SplitCase{300, 4096, 70, 0, MatmulPrecision::kF32, TcGemmKernel::kCublasLt},
                             // bf16 tensor-core GEMM with per-call dequantization of split rows.
                             SplitCase{300, 4096, 17, 0, MatmulPrecision::kBf16TensorCores, TcGemmKernel::kMmaSync},
                             SplitCase{129, 512, 16, 1, MatmulPrecision::kBf16TensorCores, TcGemmKernel::kMmaSync},
                             SplitCase{257, 1024, 200, 0, MatmulPrecision::kBf16TensorCores, TcGemmKernel::kCublasLt}));

TEST(CudaMatmulArgs, SplitRowsNeedAlignedRowsAndWholeBlocks) {
  // Pure argument checks: nothing reaches the device.
  alignas(16) float buf[1024] = {};
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf);
  const cpu::WeightView shifted{GgmlType::Q8_0_SPLIT, bytes + 2, 1, 512, 544};
  EXPECT_EQ(cuda::matmul(shifted, buf, 512, 1, buf, 1, nullptr), cudaErrorMisalignedAddress);
  const cpu::WeightView odd_stride{GgmlType::Q8_0_SPLIT, bytes, 2, 512, 552};
  EXPECT_EQ(cuda::matmul(odd_stride, buf, 512, 1, buf, 2, nullptr), cudaErrorMisalignedAddress);
  const cpu::WeightView odd_cols{GgmlType::Q8_0_SPLIT, bytes, 1, 48, 64};
  EXPECT_EQ(cuda::matmul(odd_cols, buf, 48, 1, buf, 1, nullptr), cudaErrorInvalidValue);
}

// ---- embedding and gather -----------------------------------------------------------------------

class CudaEmbed : public ::testing::TestWithParam<GgmlType> {};

TEST_P(CudaEmbed, RowsAreBitIdenticalToCpu) {
  DS_REQUIRE_GPU();
  const GgmlType type = GetParam();
  const size_t rows = 1001, cols = type == GgmlType::Q8_0 ? 96 : 70;
  Rng rng(11);
  const HostWeight w = make_weight(type, rows, cols, 0, rng);
  std::vector<int32_t> ids = {0, 1000, 5, 5, 999, 17, 0};
  std::vector<float> want(ids.size() * cols);
  cpu::embed_rows(w.view(w.bytes.data()), ids.data(), ids.size(), want.data());
  DeviceArray<uint8_t> dw(w.bytes);
  DeviceArray<int32_t> dids(ids);
  DeviceArray<float> dout(want.size());
  DS_CUDA_CHECK(cuda::embed_rows(w.view(dw.get()), dids.get(), ids.size(), dout.get(), nullptr));
  EXPECT_EQ(dout.download(), want);  // dequantization is exact on both sides
}

INSTANTIATE_TEST_SUITE_P(Types, CudaEmbed,
                         ::testing::Values(GgmlType::Q8_0, GgmlType::F16, GgmlType::BF16, GgmlType::F32));

// A split table (the tied token_embd / LM head may be stored split) gives the GGUF-order rows bit
// for bit, the NaN row of an out-of-range id included.
TEST(CudaEmbed, SplitTableGivesTheSameRows) {
  DS_REQUIRE_GPU();
  const size_t rows = 1001, cols = 1024;
  Rng rng(14);
  const HostWeight w = make_weight(GgmlType::Q8_0, rows, cols, 0, rng);
  DeviceArray<uint8_t> dq(w.bytes), dsplit(q8_split_copy(w.bytes.data(), rows, cols));
  const cpu::WeightView split{GgmlType::Q8_0_SPLIT, dsplit.get(), rows, cols, w.row_bytes};
  const std::vector<int32_t> ids = {0, 1000, 5, 5, 999, 17, 1001};
  DeviceArray<int32_t> dids(ids);
  DeviceArray<float> want(ids.size() * cols), got(ids.size() * cols);
  DS_CUDA_CHECK(cuda::embed_rows(w.view(dq.get()), dids.get(), ids.size(), want.get(), nullptr));
  DS_CUDA_CHECK(cuda::embed_rows(split, dids.get(), ids.size(), got.get(), nullptr));
  const std::vector<float> want_h = want.download();
  std::vector<float> cpu_rows((ids.size() - 1) * cols);  // the valid ids, on the CPU
  cpu::embed_rows(w.view(w.bytes.data()), ids.data(), ids.size() - 1, cpu_rows.data());
  ASSERT_TRUE(std::equal(cpu_rows.begin(), cpu_rows.end(), want_h.begin()));
  EXPECT_TRUE(same_bits(got.download(), want_h));
}

TEST(CudaEmbed, OutOfRangeIdGivesNaNRow) {
  DS_REQUIRE_GPU();
  Rng rng(12);
  const HostWeight w = make_weight(GgmlType::F32, 4, 8, 0, rng);
  DeviceArray<uint8_t> dw(w.bytes);
  DeviceArray<int32_t> dids(std::vector<int32_t>{4});
  DeviceArray<float> dout(8);
  DS_CUDA_CHECK(cuda::embed_rows(w.view(dw.get()), dids.get(), 1, dout.get(), nullptr));
  for (float v : dout.download()) EXPECT_TRUE(std::isnan(v));
}

TEST(CudaGather, CopiesRows) {
  DS_REQUIRE_GPU();
  const size_t n = 50, dim = 67;
  Rng rng(13);
  const std::vector<float> src = rng.vec(n * dim);
  const std::vector<uint32_t> rows = {49, 0, 3, 3, 17};
  std::vector<float> want;
  for (uint32_t r : rows) want.insert(want.end(), src.begin() + r * dim, src.begin() + (r + 1) * dim);
  DeviceArray<float> dsrc(src), ddst(want.size());
  DeviceArray<uint32_t> drows(rows);
  DS_CUDA_CHECK(gather_rows(dsrc.get(), drows.get(), rows.size(), dim, ddst.get(), nullptr));
  EXPECT_EQ(ddst.download(), want);
}

}  // namespace
}  // namespace ds::cuda::test
