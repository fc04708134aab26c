// Batched decode attention (kernels/cuda/attention_decode.h attention_decode_batch; the CUDA
// backend's Backend::attention_batch): all one-token sequences of a step in one launch pair.
//
// Bitwise: every sequence's output must be memcmp-equal to cuda::attention_causal for it alone
// (the batch keeps each sequence's split plan and runs the same kernels), whatever else is in
// the batch; rows of no sequence stay untouched. Against the CPU reference
// (cpu::attention_batch): 1e-5 relative to the largest output, the tolerance of the
// one-sequence CUDA attention tests (online vs two-pass softmax, different summation order of
// q.k and p.v: a few ulp of the largest value).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_decode.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/decode_batch_util.h"
#include "worker/cuda_backend.h"

namespace ds::cuda::test {
namespace {

using cpu::test::DecodeBatchHost;
using cpu::test::make_decode_batch;

constexpr double kAttentionTol = 1e-5;
constexpr float kSentinel = -12345.0f;  // DecodeBatchHost::sentinel_out

struct BatchCase {
  size_t H, Hkv, d, n_seqs;
};

// kv lengths cycling over 1, 5, 100, 700, 3000 (one key; fewer keys than a split; one split of a
// few rounds; many splits; the split cap for group 4 on an H200), started at a case-dependent
// point so even N = 1 and 3 see long and short sequences.
std::vector<size_t> kv_lens_for(size_t n, size_t start) {
  static const size_t kLens[] = {1, 5, 100, 700, 3000};
  std::vector<size_t> out;
  for (size_t i = 0; i < n; ++i) out.push_back(kLens[(start + i * 3) % 5]);
  return out;
}

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

// Per-sequence cuda::attention_causal into a sentinel-filled buffer (device tables uploaded one by one).
std::vector<float> one_by_one(const DecodeBatchHost& b, const DeviceArray<float>& dq, const DeviceArray<float>& dk,
                              const DeviceArray<float>& dv) {
  DeviceArray<float> dout(b.sentinel_out());
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    DeviceArray<int32_t> table(b.tables[i]);
    DS_CUDA_CHECK(cuda::attention_causal(b.shape(i), dq.get() + b.seqs[i].q_offset,
                                         KvPages{dk.get(), dv.get(), table.get(), b.block_size}, b.scale,
                                         dout.get() + b.seqs[i].out_offset, nullptr));
    DS_CUDA_CHECK(cudaDeviceSynchronize());  // `table` is freed at the end of the iteration
  }
  return dout.download();
}

std::vector<float> batched(const DecodeBatchHost& b, const DeviceArray<float>& dq, const DeviceArray<float>& dk,
                           const DeviceArray<float>& dv, size_t* uploads = nullptr) {
  DeviceArray<float> dout(b.sentinel_out());
  CountingUpload upload;
  EXPECT_EQ(attention_decode_batch(b.batch(dq.get(), dout.get(), dk.get(), dv.get()), upload.fn(), nullptr),
            cudaSuccess);
  if (uploads != nullptr) *uploads = upload.calls;
  return dout.download();
}

// A speculative verify row (one sequence, 1 + K query tokens in one attention_causal call): every
// token's output memcmp-equal to a one-token call over its own causal prefix, i.e. to what plain
// decoding computes for it. Lengths where the old plan (splits for 2 blocks per SM over all the
// row's tokens) cut the keys differently from the one-token plan: 700, 3000 and 4096 keys.
TEST(CudaAttentionVerifyRow, EveryTokenHasItsOneTokenBits) {
  DS_REQUIRE_GPU();
  const size_t H = 16, Hkv = 4, d = 256, bs = 16, row = Hkv * d;
  Rng rng(31);
  for (size_t kv_len : {size_t{9}, size_t{700}, size_t{3000}, size_t{4096}}) {  // >= T
    for (size_t T : {size_t{2}, size_t{4}, size_t{8}}) {
      const size_t n_blocks = (kv_len + bs - 1) / bs;
      std::vector<int32_t> table(n_blocks);
      for (size_t i = 0; i < n_blocks; ++i) table[i] = static_cast<int32_t>(n_blocks - 1 - i);  // reversed pages
      DeviceArray<float> dk(rng.vec(n_blocks * bs * row)), dv(rng.vec(n_blocks * bs * row));
      DeviceArray<float> dq(rng.vec(T * 2 * H * d)), dout(T * H * d), one(H * d);
      DeviceArray<int32_t> dtable(table);
      const KvPages kv{dk.get(), dv.get(), dtable.get(), bs};
      const cpu::AttentionShape s{T, kv_len, H, Hkv, d, 2 * H * d, 2 * d, row, H * d};
      ASSERT_EQ(cuda::attention_causal(s, dq.get(), kv, 0.0625f, dout.get(), nullptr), cudaSuccess);
      const std::vector<float> all = dout.download();
      for (size_t t = 0; t < T; ++t) {
        const cpu::AttentionShape s1{1, kv_len - T + 1 + t, H, Hkv, d, 2 * H * d, 2 * d, row, H * d};
        ASSERT_EQ(cuda::attention_causal(s1, dq.get() + t * 2 * H * d, kv, 0.0625f, one.get(), nullptr), cudaSuccess);
        const std::vector<float> alone = one.download();
        EXPECT_EQ(std::memcmp(alone.data(), all.data() + t * H * d, H * d * sizeof(float)), 0)
            << "kv_len " << kv_len << " T " << T << " token " << t;
      }
    }
  }
}

class CudaAttentionBatch : public ::testing::TestWithParam<BatchCase> {};

TEST_P(CudaAttentionBatch, BitIdenticalToOneByOneAndCloseToCpu) {
  DS_REQUIRE_GPU();
  const BatchCase c = GetParam();
  Rng rng(900 + c.n_seqs * 7 + c.d);
  const DecodeBatchHost b = make_decode_batch(rng, c.H, c.Hkv, c.d, kv_lens_for(c.n_seqs, c.n_seqs), 300);
  ASSERT_TRUE(attention_decode_batch_applies(b.batch(nullptr, nullptr, nullptr, nullptr)));
  DeviceArray<float> dq(b.q), dk(b.k_pool), dv(b.v_pool);

  size_t uploads = 0;
  const std::vector<float> got = batched(b, dq, dk, dv, &uploads);
  EXPECT_EQ(uploads, 1u) << "descriptors and block tables go up in one copy";
  EXPECT_TRUE(same_bits(got, one_by_one(b, dq, dk, dv))) << "batched output differs from attention_causal alone";

  std::vector<float> want = b.sentinel_out();
  cpu::attention_batch(b.batch(b.q.data(), want.data(), b.k_pool.data(), b.v_pool.data()), nullptr);
  EXPECT_LE(rel_error(got, want), kAttentionTol);
  const size_t spare = b.row_of.back() * b.out_row();
  for (size_t j = 0; j < b.out_row(); ++j) ASSERT_EQ(got[spare + j], kSentinel) << "spare row written at " << j;
}

// 9B (group 4, d 256), 27B-like (group 6), group 8 with a head dim that is not a multiple of 32,
// and group 1 (one query head per kv head).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionBatch,
                         ::testing::Values(BatchCase{16, 4, 256, 1}, BatchCase{16, 4, 256, 3},
                                           BatchCase{16, 4, 256, 17}, BatchCase{16, 4, 256, 64},
                                           BatchCase{24, 4, 256, 17}, BatchCase{8, 1, 80, 3}, BatchCase{8, 1, 80, 64},
                                           BatchCase{4, 4, 128, 17}),
                         [](const ::testing::TestParamInfo<BatchCase>& param_info) {
                           const BatchCase& c = param_info.param;
                           return "H" + std::to_string(c.H) + "_Hkv" + std::to_string(c.Hkv) + "_d" +
                                  std::to_string(c.d) + "_N" + std::to_string(c.n_seqs);
                         });

// A sequence's bits do not depend on its batch: the same sequence (same q row contents, table
// and kv_len) alone, with 2 others, and inside 64 gives one output.
TEST(CudaAttentionBatchInvariance, SameSequenceSameBitsInAnyBatch) {
  DS_REQUIRE_GPU();
  Rng rng(4242);
  const DecodeBatchHost big = make_decode_batch(rng, 16, 4, 256, kv_lens_for(64, 1), 300);
  DeviceArray<float> dq(big.q), dk(big.k_pool), dv(big.v_pool);
  const std::vector<float> all = batched(big, dq, dk, dv);
  for (const size_t keep : {size_t{1}, size_t{3}}) {
    DecodeBatchHost small = big;  // the first `keep` sequences, same rows and tables
    small.seqs.resize(keep);
    for (size_t i = 0; i < keep; ++i) small.seqs[i].block_table = small.tables[i].data();
    const std::vector<float> part = batched(small, dq, dk, dv);
    for (size_t i = 0; i < keep; ++i) {
      const size_t at = big.seqs[i].out_offset;
      EXPECT_EQ(std::memcmp(part.data() + at, all.data() + at, big.out_row() * sizeof(float)), 0)
          << "sequence " << i << " in a batch of " << keep;
    }
  }
}

// Enough long sequences that the partials pass the 128 MiB cut (on a 132-SM H200: 66 splits x 16
// heads x 258 floats per sequence), so the batch runs as several launches over one upload: still
// bit-identical per sequence. On a GPU with fewer SMs this may stay one launch; it must pass alike.
TEST(CudaAttentionBatchLarge, ManySequencesStillBitIdentical) {
  DS_REQUIRE_GPU();
  Rng rng(31337);
  const DecodeBatchHost b = make_decode_batch(rng, 16, 4, 256, std::vector<size_t>(200, 2500), 300);
  DeviceArray<float> dq(b.q), dk(b.k_pool), dv(b.v_pool);
  size_t uploads = 0;
  const std::vector<float> got = batched(b, dq, dk, dv, &uploads);
  EXPECT_EQ(uploads, 1u);
  EXPECT_TRUE(same_bits(got, one_by_one(b, dq, dk, dv)));
}

// The CUDA backend's override (host block tables; its own control buffer, whose upload is skipped
// when a later layer repeats it) equals its per-sequence attention_causal, bit for bit, on two
// different batches in a row; so does the default loop (fused decode ops off).
TEST(CudaBackendAttentionBatch, EqualsPerSequenceCalls) {
  DS_REQUIRE_GPU();
  for (const bool fused : {true, false}) {
    std::unique_ptr<Backend> be = make_cuda_backend(0, {}, {.fused_decode_ops = fused});
    Rng rng(fused ? 5 : 6);
    for (const size_t n : {size_t{17}, size_t{5}}) {
      const DecodeBatchHost b = make_decode_batch(rng, 16, 4, 256, kv_lens_for(n, n), 200);
      float* q = be->alloc(b.q.size());
      float* k = be->alloc(b.k_pool.size());
      float* v = be->alloc(b.v_pool.size());
      float* out_batch = be->alloc(b.n_rows() * b.out_row());
      float* out_loop = be->alloc(b.n_rows() * b.out_row());
      be->upload(q, b.q.data(), b.q.size());
      be->upload(k, b.k_pool.data(), b.k_pool.size());
      be->upload(v, b.v_pool.data(), b.v_pool.size());
      for (int layer = 0; layer < 2; ++layer) be->attention_batch(b.batch(q, out_batch, k, v));
      for (size_t i = 0; i < n; ++i) {
        be->attention_causal(b.shape(i), q + b.seqs[i].q_offset, KvPages{k, v, b.tables[i].data(), b.block_size},
                             b.scale, out_loop + b.seqs[i].out_offset);
      }
      std::vector<float> got(b.n_rows() * b.out_row()), want(got.size());
      be->download(got.data(), out_batch, got.size());
      be->download(want.data(), out_loop, want.size());
      EXPECT_TRUE(same_bits(got, want)) << "fused " << fused << " n " << n;
      for (float* p : {q, k, v, out_batch, out_loop}) be->release(p);
    }
  }
}

// ---- arguments (checked before any device work: these run without a GPU) ----------------------

struct ArgsFixture {
  float dummy[64] = {};
  int32_t table[4] = {0, 0, 0, 0};
  AttentionBatchSeq seqs[2] = {{3, 0, 0, table}, {50, 16, 8, table}};
  AttentionBatch ok() { return AttentionBatch{2, 1, 8, 8, 8, dummy, dummy, 16, 0.5f, dummy, dummy, seqs, 2}; }
};

TEST(CudaAttentionBatchArgs, RejectsBadInputsBeforeAnyWork) {
  ArgsFixture f;
  CountingUpload upload;
  const auto expect = [&](AttentionBatch b, cudaError_t want, const char* what) {
    EXPECT_EQ(attention_decode_batch(b, upload.fn(), nullptr), want) << what;
  };
  AttentionBatch b = f.ok();
  b.seqs = nullptr;
  expect(b, cudaErrorInvalidValue, "no sequences array");
  b = f.ok();
  b.q = nullptr;
  expect(b, cudaErrorInvalidValue, "null q");
  b = f.ok();
  b.out = nullptr;
  expect(b, cudaErrorInvalidValue, "null out");
  b = f.ok();
  b.k_pool = nullptr;
  expect(b, cudaErrorInvalidValue, "null k pool");
  b = f.ok();
  b.v_pool = nullptr;
  expect(b, cudaErrorInvalidValue, "null v pool");
  b = f.ok();
  b.q = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(f.dummy) + 2);
  expect(b, cudaErrorMisalignedAddress, "misaligned q");
  b = f.ok();
  b.head_dim = 0;
  expect(b, cudaErrorInvalidValue, "head_dim 0");
  b = f.ok();
  b.head_dim = b.q_head_stride = 512;
  b.kv_row_stride = 512;
  expect(b, cudaErrorInvalidValue, "head_dim above 256");
  b = f.ok();
  b.n_heads = 12;  // group 12 > 8: the backend loops attention_causal instead
  b.kv_row_stride = 8;
  EXPECT_FALSE(attention_decode_batch_applies(b));
  expect(b, cudaErrorInvalidValue, "group 12");
  b = f.ok();
  b.n_heads = 3;
  b.n_kv_heads = 2;
  b.kv_row_stride = 16;
  expect(b, cudaErrorInvalidValue, "heads not a multiple of kv heads");
  b = f.ok();
  b.n_kv_heads = 0;
  expect(b, cudaErrorInvalidValue, "no kv heads");
  b = f.ok();
  b.block_size = 0;
  expect(b, cudaErrorInvalidValue, "block size 0");
  b = f.ok();
  b.kv_row_stride = 4;
  expect(b, cudaErrorInvalidValue, "cache row shorter than the kv heads");
  b = f.ok();
  b.q_head_stride = 4;
  expect(b, cudaErrorInvalidValue, "query heads overlap");
  AttentionBatchSeq bad[2] = {f.seqs[0], f.seqs[1]};
  bad[1].block_table = nullptr;
  b = f.ok();
  b.seqs = bad;
  expect(b, cudaErrorInvalidValue, "a sequence without a block table");
  bad[1] = f.seqs[1];
  bad[1].kv_len = 0;
  expect(b, cudaErrorInvalidValue, "kv_len 0 (the query token is always in the cache)");
  bad[1].kv_len = size_t{1} << 32;
  expect(b, cudaErrorInvalidValue, "kv_len past 32 bits");
  EXPECT_EQ(attention_decode_batch(f.ok(), DeviceUpload{}, nullptr), cudaErrorInvalidValue) << "no upload";
  EXPECT_EQ(upload.calls, 0u) << "nothing may be uploaded for a rejected batch";

  b = f.ok();
  b.n_seqs = 0;
  b.seqs = nullptr;
  EXPECT_EQ(attention_decode_batch(b, upload.fn(), nullptr), cudaSuccess) << "an empty batch is a no-op";
  EXPECT_EQ(upload.calls, 0u);
}

TEST(CudaAttentionBatchArgs, AppliesToTheSplitKShapes) {
  ArgsFixture f;
  AttentionBatch b = f.ok();
  EXPECT_TRUE(attention_decode_batch_applies(b));
  b.n_heads = 16;
  b.n_kv_heads = 2;  // group 8: the largest the split kernel holds
  EXPECT_TRUE(attention_decode_batch_applies(b));
  b.n_heads = 18;  // group 9
  EXPECT_FALSE(attention_decode_batch_applies(b));
}

}  // namespace
}  // namespace ds::cuda::test
