// Backend::attention_batch's default (the CPU backend's behaviour): a decode step's
// sequences through the virtual interface give, bit for bit, what the backend's attention_causal
// gives each sequence alone with the model's per-sequence shape; the spare row stays untouched.
// Backend::matmul_rows's default: a stacked matrix's rows to separate outputs, bit for bit the
// separate products of its row ranges.
// Backend::gdn_decode_slots's raw-gate default: bit for bit the gates (host formulas) followed by
// the backend's one-sequence gdn of each sequence on its pool slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu/activation.h"
#include "tests/kernels/decode_batch_util.h"
#include "worker/backend.h"

namespace ds::test {
namespace {

TEST(CpuBackendDecodeBatch, EqualsPerSequenceCalls) {
  const std::unique_ptr<Backend> be = make_cpu_backend(2);
  cpu::test::Rng rng(11);
  const cpu::test::DecodeBatchHost b = cpu::test::make_decode_batch(rng, 16, 4, 64, {700, 1, 33, 5, 100}, 64);
  std::vector<float> got = b.sentinel_out(), want = b.sentinel_out();
  be->attention_batch(b.batch(b.q.data(), got.data(), b.k_pool.data(), b.v_pool.data()));
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

TEST(CpuBackendGdnSlots, RawGatesEqualGatesThenPerSequenceRecurrence) {
  const std::unique_ptr<Backend> be = make_cpu_backend(2);
  cpu::test::Rng rng(13);
  const size_t nk = 2, nv = 4, dk = 8, dv = 8, C = 2 * nk * dk + nv * dv, n = 3, pool = 4;
  const size_t state_floats = nv * dk * dv, slot_stride = state_floats + 5, gate_stride = 2 * nv + 3;
  const std::vector<uint32_t> slots{2, 0, 3};  // out of order; slot 1 is not in the step
  const GdnShape shape{1, nk, nv, dk, dv, C, C};
  const std::vector<float> conv = rng.vec(n * C, -0.3f, 0.3f), rows = rng.vec(n * gate_stride, -4.0f, 4.0f);
  const std::vector<float> a = rng.vec(nv, -3.0f, -0.1f), dt_bias = rng.vec(nv);
  const std::vector<float> states = rng.vec(pool * slot_stride, -0.1f, 0.1f);
  // rows: [alpha (nv) | 3 unused | beta_raw (nv)] per sequence.
  const GdnRawGates gates{rows.data(), gate_stride, rows.data() + nv + 3, gate_stride, a.data(), dt_bias.data()};
  std::vector<float> got_state = states, got(n * nv * dv);
  be->gdn_decode_slots(shape, conv.data(), conv.data() + nk * dk, conv.data() + 2 * nk * dk, gates, got_state.data(),
                       slot_stride, slots.data(), n, got.data());
  std::vector<float> want_state = states, want(n * nv * dv), g(nv), beta(nv);
  for (size_t i = 0; i < n; ++i) {
    for (size_t h = 0; h < nv; ++h) {
      g[h] = a[h] * cpu::softplus(rows[i * gate_stride + h] + dt_bias[h]);
      beta[h] = cpu::sigmoid(rows[i * gate_stride + nv + 3 + h]);
    }
    const float* q = conv.data() + i * C;
    be->gdn(shape, q, q + nk * dk, q + 2 * nk * dk, g.data(), beta.data(), want_state.data() + slots[i] * slot_stride,
            want.data() + i * nv * dv);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_state, want_state);
  EXPECT_NE(got_state, states) << "the step's slots change";
  EXPECT_TRUE(
      std::equal(states.begin() + slot_stride, states.begin() + 2 * slot_stride, got_state.begin() + slot_stride))
      << "slot 1 stays untouched";
}

}  // namespace
}  // namespace ds::test
