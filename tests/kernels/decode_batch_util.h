// A step's attention inputs for the batched-attention tests (CPU reference, CPU backend, CUDA):
// N sequences over shared KV pools, laid out like the model's (kernels/cpu/attention.h
// AttentionBatch), one query token each unless n_qs says otherwise (a prefill chunk's
// queries are its last n_q cache rows; kv_len > n_q is a prefix-cached sequence). Block tables
// draw random ids from the whole pool, so a sequence's pages are non-contiguous and sequences may
// share blocks (as prefix-cache hits do). Sequences' row blocks are shuffled: sequence i's rows
// start at row row_of[i], and one spare row belongs to no sequence (an op must leave it untouched).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace ds::cpu::test {

struct DecodeBatchHost {
  size_t H, Hkv, d, block_size;
  float scale;
  std::vector<float> k_pool, v_pool;
  std::vector<float> q;                      // [n_seqs + 1][H][query | gate]
  std::vector<std::vector<int32_t>> tables;  // per sequence
  std::vector<size_t> row_of;                // per sequence made: its first q / out row; last: the spare row
  std::vector<AttentionBatchSeq> seqs;       // block tables point into `tables`
  size_t rows = 0;                           // every sequence's rows + the spare (kept when seqs shrinks)

  size_t n_rows() const { return rows; }
  size_t q_row() const { return 2 * H * d; }
  size_t out_row() const { return H * d; }
  size_t kv_row() const { return Hkv * d; }

  // The batch over the given q / out / pools (host or device) and these (host) tables.
  AttentionBatch batch(const float* q_ptr, float* out_ptr, const float* k, const float* v) const {
    return AttentionBatch{H,          Hkv,   d,     2 * d,   kv_row(),    k,          v,
                          block_size, scale, q_ptr, out_ptr, seqs.data(), seqs.size()};
  }
  // attention_causal's shape for sequence i, as the model's per-sequence loop builds it.
  AttentionShape shape(size_t i) const {
    return AttentionShape{seqs[i].n_q_tokens, seqs[i].kv_len, H, Hkv, d, q_row(), 2 * d, kv_row(), out_row()};
  }
  // An output buffer prefilled with a value no attention output takes, to see untouched rows.
  std::vector<float> sentinel_out() const { return std::vector<float>(n_rows() * out_row(), -12345.0f); }
};

// n_qs: query tokens per sequence (empty: one each); n_qs[i] <= kv_lens[i].
inline DecodeBatchHost make_decode_batch(Rng& rng, size_t H, size_t Hkv, size_t d, const std::vector<size_t>& kv_lens,
                                         size_t pool_blocks, size_t block_size = 16,
                                         const std::vector<size_t>& n_qs = {}) {
  DecodeBatchHost b{H, Hkv, d, block_size, 1.0f / std::sqrt(static_cast<float>(d)), {}, {}, {}, {}, {}, {}, 0};
  const size_t n = kv_lens.size();
  const auto n_q = [&](size_t i) { return i < n && !n_qs.empty() ? n_qs[i] : size_t{1}; };  // spare: 1 row
  b.k_pool = rng.vec(pool_blocks * block_size * b.kv_row(), -2, 2);
  b.v_pool = rng.vec(b.k_pool.size(), -2, 2);
  std::vector<size_t> order(n + 1);
  for (size_t i = 0; i <= n; ++i) order[i] = i;
  for (size_t i = n; i > 0; --i) {  // Fisher-Yates; entry n is the spare row
    std::swap(order[i], order[static_cast<size_t>(rng.integer(0, static_cast<int>(i)))]);
  }
  b.row_of.resize(n + 1);
  for (const size_t i : order) {
    b.row_of[i] = b.rows;
    b.rows += n_q(i);
  }
  b.q = rng.vec(b.n_rows() * b.q_row(), -2, 2);
  b.tables.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t n_blocks = (kv_lens[i] + block_size - 1) / block_size;
    for (size_t j = 0; j < n_blocks; ++j) {
      b.tables[i].push_back(static_cast<int32_t>(rng.integer(0, static_cast<int>(pool_blocks) - 1)));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    b.seqs.push_back(
        AttentionBatchSeq{kv_lens[i], b.row_of[i] * b.q_row(), b.row_of[i] * b.out_row(), b.tables[i].data(), n_q(i)});
  }
  return b;
}

}  // namespace ds::cpu::test
