// Batched prefill attention (kernels/cuda/attention_prefill.h attention_prefill_batch, and the CUDA
// backend's Backend::attention_batch routing a mixed step through it): many prefill chunks
// of a step in one launch of the tiled kernel (f32) or one gather + one launch (bf16 tensor cores).
//
// Bitwise: every sequence's output is memcmp-equal to its one-sequence attention_prefill /
// attention_prefill_tc call (the batched kernels run the same tile code). Against the CPU
// reference, the tolerances of test_cuda_attention_prefill.cpp, relative (max |got - want| /
// max |want|): f32 kF32Tol = 2e-5 (both sides f32 with an online softmax; only the summation order
// and expf ulps differ); tensor cores kTcTol = 4e-3 against the CPU on the operands the kernel
// rounds (q * scale, K, V to bf16), leaving the bf16 rounding of the softmax weights (2^-9 each)
// and the summation order. Decode rows of a mixed step keep the decode kernels: 2e-5 covers their
// 1e-5 (test_cuda_attention_batch.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/ggml_types.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention_prefill.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/decode_batch_util.h"
#include "worker/cuda_backend.h"

namespace ds::cuda::test {
namespace {

using cpu::test::DecodeBatchHost;
using cpu::test::make_decode_batch;

constexpr double kF32Tol = 2e-5;
constexpr double kTcTol = 4e-3;
constexpr float kSentinel = -12345.0f;  // DecodeBatchHost::sentinel_out

// A mixed step: decode rows (1), a short verify-like row (5), chunks of 17, 64, 337 and 1000
// tokens, and two prefix-cached chunks (64 of 100 rows, 40 of 400).
const std::vector<size_t> kNq = {17, 64, 337, 1000, 1, 5, 40, 1};
const std::vector<size_t> kKv = {17, 100, 337, 1000, 50, 5, 400, 700};

// The sequences with enough queries for the tiled kernels.
std::vector<size_t> prefill_seqs(const DecodeBatchHost& b) {
  std::vector<size_t> out;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    if (b.seqs[i].n_q_tokens >= kAttentionPrefillMinTokens) out.push_back(i);
  }
  return out;
}

struct Dev {
  DeviceArray<float> q, k, v;
  explicit Dev(const DecodeBatchHost& b) : q(b.q), k(b.k_pool), v(b.v_pool) {}
};

// A test-owned upload: one device buffer per call, counted.
struct CountingUpload {
  std::vector<std::unique_ptr<DeviceArray<unsigned char>>> buffers;
  size_t calls = 0;
  DeviceUpload fn() {
    return [this](const void* host, size_t bytes) -> const void* {
      ++calls;
      buffers.push_back(std::make_unique<DeviceArray<unsigned char>>(bytes));
      DS_CUDA_CHECK(cudaMemcpy(buffers.back()->get(), host, bytes, cudaMemcpyHostToDevice));
      return buffers.back()->get();
    };
  }
};

std::vector<float> batched(const DecodeBatchHost& b, const std::vector<size_t>& which, bool tc, Dev& d,
                           size_t* uploads = nullptr) {
  DeviceArray<float> out(b.sentinel_out());
  CountingUpload upload;
  EXPECT_EQ(attention_prefill_batch(b.batch(d.q.get(), out.get(), d.k.get(), d.v.get()), which.data(), which.size(), tc,
                                    upload.fn(), nullptr),
            cudaSuccess);
  if (uploads != nullptr) *uploads = upload.calls;
  return out.download();
}

// Each sequence of `which` through its one-sequence launcher.
std::vector<float> one_by_one(const DecodeBatchHost& b, const std::vector<size_t>& which, bool tc, Dev& d) {
  DeviceArray<float> out(b.sentinel_out());
  for (const size_t i : which) {
    DeviceArray<int32_t> table(b.tables[i]);
    const KvPages kv{d.k.get(), d.v.get(), table.get(), b.block_size};
    const float* q = d.q.get() + b.seqs[i].q_offset;
    float* o = out.get() + b.seqs[i].out_offset;
    DS_CUDA_CHECK(tc ? attention_prefill_tc(b.shape(i), q, kv, b.scale, o, nullptr)
                     : attention_prefill(b.shape(i), q, kv, b.scale, o, nullptr));
    DS_CUDA_CHECK(cudaDeviceSynchronize());  // `table` is freed at the end of the iteration
  }
  return out.download();
}

float round_bf16(float x) {
  return bf16_to_fp32(fp32_to_bf16(x));
}

// The CPU reference over every sequence; `rounded`: on the operands the tc kernel rounds.
std::vector<float> cpu_reference(const DecodeBatchHost& b, bool rounded) {
  DecodeBatchHost r = b;  // its seqs still point at b's tables (same contents)
  if (rounded) {
    for (float& x : r.q) x = round_bf16(x * b.scale);
    for (float& x : r.k_pool) x = round_bf16(x);
    for (float& x : r.v_pool) x = round_bf16(x);
    r.scale = 1.0f;
  }
  std::vector<float> want = r.sentinel_out();
  cpu::attention_batch(r.batch(r.q.data(), want.data(), r.k_pool.data(), r.v_pool.data()), nullptr);
  return want;
}

// Sequence i's output rows.
std::vector<float> rows_of(const DecodeBatchHost& b, const std::vector<float>& all, size_t i) {
  const auto first = all.begin() + static_cast<long>(b.seqs[i].out_offset);
  return std::vector<float>(first, first + static_cast<long>(b.seqs[i].n_q_tokens * b.out_row()));
}

struct Shape {
  size_t H, Hkv, d;
  bool tc;
};

class CudaAttentionPrefillBatch : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaAttentionPrefillBatch, BitIdenticalToOneByOneAndCloseToCpu) {
  DS_REQUIRE_GPU();
  const Shape c = GetParam();
  Rng rng(500 + c.d + c.H + (c.tc ? 1 : 0));
  const DecodeBatchHost b = make_decode_batch(rng, c.H, c.Hkv, c.d, kKv, 300, 16, kNq);
  const std::vector<size_t> which = prefill_seqs(b);
  Dev d(b);
  size_t uploads = 0;
  const std::vector<float> got = batched(b, which, c.tc, d, &uploads);
  EXPECT_EQ(uploads, 1u) << "tiles, gathers and block tables go up in one copy";
  EXPECT_TRUE(same_bits(got, one_by_one(b, which, c.tc, d))) << "batched output differs from the one-sequence call";

  const std::vector<float> want = cpu_reference(b, c.tc);
  for (const size_t i : which) {
    EXPECT_LE(rel_error(rows_of(b, got, i), rows_of(b, want, i)), c.tc ? kTcTol : kF32Tol)
        << "sequence " << i << " (" << b.seqs[i].n_q_tokens << " of " << b.seqs[i].kv_len << " rows)";
  }
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    if (b.seqs[i].n_q_tokens >= kAttentionPrefillMinTokens) continue;
    for (const float x : rows_of(b, got, i)) ASSERT_EQ(x, kSentinel) << "sequence " << i << " is not in the batch";
  }
  const size_t spare = b.row_of.back() * b.out_row();
  for (size_t j = 0; j < b.out_row(); ++j) ASSERT_EQ(got[spare + j], kSentinel) << "spare row written at " << j;
}

// qwen3-0.6B heads (group 2, d 128), qwen3.5 heads (group 4, d 256), group 3 with d 64; f32 also
// with a head dim the tc kernel does not take (80).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionPrefillBatch,
                         ::testing::Values(Shape{16, 8, 128, false}, Shape{16, 8, 128, true}, Shape{16, 4, 256, false},
                                           Shape{16, 4, 256, true}, Shape{6, 2, 64, false}, Shape{6, 2, 64, true},
                                           Shape{8, 2, 80, false}),
                         [](const ::testing::TestParamInfo<Shape>& p) {
                           const Shape& c = p.param;
                           return "H" + std::to_string(c.H) + "_Hkv" + std::to_string(c.Hkv) + "_d" +
                                  std::to_string(c.d) + (c.tc ? "_tc" : "_f32");
                         });

// The rerank step that motivated the batch: 100 documents of 337 tokens (qwen3-0.6B heads), one
// upload, each document's bits those of its own call, on both paths.
TEST(CudaAttentionPrefillBatchLarge, HundredDocumentsBitIdentical) {
  DS_REQUIRE_GPU();
  Rng rng(337);
  const DecodeBatchHost b =
      make_decode_batch(rng, 16, 8, 128, std::vector<size_t>(100, 337), 300, 16, std::vector<size_t>(100, 337));
  const std::vector<size_t> which = prefill_seqs(b);
  ASSERT_EQ(which.size(), 100u);
  Dev d(b);
  for (const bool tc : {false, true}) {
    size_t uploads = 0;
    EXPECT_TRUE(same_bits(batched(b, which, tc, d, &uploads), one_by_one(b, which, tc, d))) << "tc " << tc;
    EXPECT_EQ(uploads, 1u);
  }
}

// Enough cached rows that the bf16 copies pass the 256 MiB cut (40 x 1000 rows x 8 KiB), so the tc
// batch runs as two gather + attention pairs over one upload: still bit-identical per sequence.
TEST(CudaAttentionPrefillBatchLarge, CopiesCutIntoSeveralLaunchesStillBitIdentical) {
  DS_REQUIRE_GPU();
  Rng rng(1000);
  const DecodeBatchHost b =
      make_decode_batch(rng, 16, 8, 256, std::vector<size_t>(40, 1000), 300, 16, std::vector<size_t>(40, 16));
  const std::vector<size_t> which = prefill_seqs(b);
  Dev d(b);
  size_t uploads = 0;
  EXPECT_TRUE(same_bits(batched(b, which, true, d, &uploads), one_by_one(b, which, true, d)));
  EXPECT_EQ(uploads, 1u);
}

// The CUDA backend's step attention over a mixed step (decode rows, a 5-token row, prefill chunks,
// prefix-cached chunks), twice as two layers would (the second upload is skipped): equal bit for
// bit to its per-sequence attention_causal, and close to the CPU (prefill chunks of the bf16 mode
// against the rounded operands; everything else in f32).
TEST(CudaBackendAttentionStep, MixedStepEqualsPerSequenceCalls) {
  DS_REQUIRE_GPU();
  for (const bool bf16 : {false, true}) {
    std::unique_ptr<Backend> be = make_cuda_backend(0, {.bf16_prefill = bf16});
    Rng rng(bf16 ? 61 : 60);
    const DecodeBatchHost b = make_decode_batch(rng, 16, 8, 128, kKv, 300, 16, kNq);
    float* q = be->alloc(b.q.size());
    float* k = be->alloc(b.k_pool.size());
    float* v = be->alloc(b.v_pool.size());
    float* out_batch = be->alloc(b.n_rows() * b.out_row());
    float* out_loop = be->alloc(b.n_rows() * b.out_row());
    be->upload(q, b.q.data(), b.q.size());
    be->upload(k, b.k_pool.data(), b.k_pool.size());
    be->upload(v, b.v_pool.data(), b.v_pool.size());
    for (int layer = 0; layer < 2; ++layer) be->attention_batch(b.batch(q, out_batch, k, v));
    for (size_t i = 0; i < b.seqs.size(); ++i) {
      be->attention_causal(b.shape(i), q + b.seqs[i].q_offset, KvPages{k, v, b.tables[i].data(), b.block_size}, b.scale,
                           out_loop + b.seqs[i].out_offset);
    }
    std::vector<float> got(b.n_rows() * b.out_row()), loop(got.size());
    be->download(got.data(), out_batch, got.size());
    be->download(loop.data(), out_loop, loop.size());
    EXPECT_TRUE(same_bits(got, loop)) << "bf16 " << bf16;
    const std::vector<float> exact = cpu_reference(b, false), rounded = bf16 ? cpu_reference(b, true) : exact;
    for (size_t i = 0; i < b.seqs.size(); ++i) {
      const bool tiled_tc = bf16 && b.seqs[i].n_q_tokens >= kAttentionPrefillMinTokens;
      EXPECT_LE(rel_error(rows_of(b, got, i), rows_of(b, tiled_tc ? rounded : exact, i)), tiled_tc ? kTcTol : kF32Tol)
          << "bf16 " << bf16 << " sequence " << i;
    }
    for (float* p : {q, k, v, out_batch, out_loop}) be->release(p);
  }
}

// ---- arguments (checked before any device work: these run without a GPU) ----------------------

TEST(CudaAttentionPrefillBatchArgs, RejectsBadInputsBeforeAnyWork) {
  alignas(16) float dummy[256] = {};
  const int32_t table[4] = {0, 0, 0, 0};
  AttentionBatchSeq seqs[2] = {{20, 0, 0, table, 20}, {40, 64, 64, table, 17}};
  const auto ok = [&] { return AttentionBatch{2, 1, 8, 8, 8, dummy, dummy, 16, 0.5f, dummy, dummy, seqs, 2}; };
  const size_t both[2] = {0, 1};
  CountingUpload upload;
  EXPECT_TRUE(attention_prefill_batch_applies(ok(), 1, false));
  EXPECT_FALSE(attention_prefill_batch_applies(ok(), 1, true)) << "head_dim 8: no tensor-core kernel";
  EXPECT_FALSE(attention_prefill_batch_applies(ok(), 2, false)) << "no sequence 2";
  EXPECT_EQ(attention_prefill_batch(ok(), both, 2, true, upload.fn(), nullptr), cudaErrorInvalidValue);
  const size_t out_of_range[1] = {2};
  EXPECT_EQ(attention_prefill_batch(ok(), out_of_range, 1, false, upload.fn(), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(attention_prefill_batch(ok(), nullptr, 2, false, upload.fn(), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(attention_prefill_batch(ok(), both, 2, false, DeviceUpload{}, nullptr), cudaErrorInvalidValue);
  AttentionBatch b = ok();
  b.head_dim = b.q_head_stride = 6;  // not whole float4s
  EXPECT_EQ(attention_prefill_batch(b, both, 2, false, upload.fn(), nullptr), cudaErrorInvalidValue);
  seqs[1].kv_len = 10;  // fewer cache rows than query tokens
  EXPECT_EQ(attention_prefill_batch(ok(), both, 2, false, upload.fn(), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(upload.calls, 0u) << "nothing may be uploaded for a rejected batch";
  EXPECT_EQ(attention_prefill_batch(ok(), both, 0, false, upload.fn(), nullptr), cudaSuccess) << "nothing to do";
  EXPECT_EQ(upload.calls, 0u);
  seqs[1].kv_len = 40;  // the decode launcher takes one-token sequences only
  EXPECT_EQ(attention_decode_batch(ok(), upload.fn(), nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ds::cuda::test
