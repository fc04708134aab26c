// Backend::attention_decode_batch's default (the CPU backend's behaviour): a decode step's
// sequences through the virtual interface give, bit for bit, what the backend's attention_causal
// gives each sequence alone with the model's per-sequence shape; the spare row stays untouched.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/kernels/decode_batch_util.h"
#include "worker/backend.h"

namespace ds::test {
namespace {

TEST(CpuBackendDecodeBatch, EqualsPerSequenceCalls) {
  const std::unique_ptr<Backend> be = make_cpu_backend(2);
  cpu::test::Rng rng(11);
  const cpu::test::DecodeBatchHost b = cpu::test::make_decode_batch(rng, 16, 4, 64, {700, 1, 33, 5, 100}, 64);
  std::vector<float> got = b.sentinel_out(), want = b.sentinel_out();
  be->attention_decode_batch(b.batch(b.q.data(), got.data(), b.k_pool.data(), b.v_pool.data()));
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    be->attention_causal(b.shape(i), b.q.data() + b.seqs[i].q_offset,
                         KvPages{b.k_pool.data(), b.v_pool.data(), b.tables[i].data(), b.block_size}, b.scale,
                         want.data() + b.seqs[i].out_offset);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(got[b.row_of.back() * b.out_row()], -12345.0f) << "the spare row belongs to no sequence";
  for (size_t i = 0; i < b.seqs.size(); ++i) EXPECT_NE(got[b.seqs[i].out_offset], -12345.0f) << "row of " << i;
}

}  // namespace
}  // namespace ds::test
