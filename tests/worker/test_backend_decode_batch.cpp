// Backend::attention_decode_batch's default (the CPU backend's behaviour): a decode step's
// sequences through the virtual interface give, bit for bit, what the backend's attention_causal
// gives each sequence alone with the model's per-sequence shape; the spare row stays untouched.
// Backend::matmul_rows's default: a stacked matrix's rows to separate outputs, bit for bit the
// separate products of its row ranges.
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

TEST(CpuBackendMatmulRows, EqualsTheRowRangesProducts) {
  const std::unique_ptr<Backend> be = make_cpu_backend(2);
  cpu::test::Rng rng(12);
  const size_t rows = 7 + 5 + 3, cols = 64, n = 3;
  const std::vector<float> w = rng.vec(rows * cols), x = rng.vec(n * cols);
  const WeightView all{GgmlType::F32, w.data(), rows, cols, cols * sizeof(float)};
  std::vector<float> a(n * 7 + 1, -1.0f), b(n * 5, -1.0f), c(n * 3, -1.0f);
  const Backend::RowOutput outs[] = {{7, a.data(), 7}, {5, b.data(), 5}, {3, c.data(), 3}};
  be->matmul_rows(all, x.data(), cols, n, outs, 3);
  size_t first = 0;
  for (const Backend::RowOutput& o : outs) {
    std::vector<float> want(n * o.rows);
    const WeightView part{GgmlType::F32, w.data() + first * cols, o.rows, cols, cols * sizeof(float)};
    be->matmul(part, x.data(), cols, n, want.data(), o.rows);
    EXPECT_EQ(std::vector<float>(o.y, o.y + n * o.rows), want) << "rows from " << first;
    first += o.rows;
  }
  EXPECT_EQ(a.back(), -1.0f) << "past the last output row";
}

}  // namespace
}  // namespace ds::test
