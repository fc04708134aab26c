#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/dot.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/cpu/thread_pool.h"

namespace ds::cpu {
namespace {

// Head values [head_off, head_off + d) of cache row tau of a pool of type t: a pointer into an f32
// pool, else decoded into `scratch`.
const float* head_values(const void* pool, KvType t, const KvPages& kv, size_t row_stride, size_t tau, size_t head_off,
                         size_t d, float* scratch) {
  const size_t row = kv_pool_row(kv.block_table, kv.block_size, tau);
  if (t == KvType::kF32) return static_cast<const float*>(pool) + row * row_stride + head_off;
  const uint8_t* bytes = static_cast<const uint8_t*>(pool) + row * kv_row_bytes(t, row_stride);
  kv_decode_range(t, bytes, row_stride, head_off, d, scratch);
  return scratch;
}

// One (query token, head): out[d] = sum_{tau < n_keys} softmax(scale * q.k_tau)_tau v_tau[d].
// `head_off` selects the kv head inside a cache row. scores: n_keys floats of scratch, row: d.
// The keys are visited in row order whatever the paging, so the result does not depend on which
// pool blocks hold the rows (bit-identical to a contiguous cache).
void attend_one(const float* q, const KvPages& kv, size_t row_stride, size_t head_off, size_t n_keys, size_t d,
                float scale, float* scores, float* row, float* out) {
  float mx = -INFINITY;
  for (size_t tau = 0; tau < n_keys; ++tau) {
    const float* kt = head_values(kv.k_pool, kv.k_type, kv, row_stride, tau, head_off, d, row);
    scores[tau] = detail::dot(q, kt, d) * scale;
    mx = std::max(mx, scores[tau]);
  }
  float sum = 0.0f;
  for (size_t tau = 0; tau < n_keys; ++tau) {
    scores[tau] = std::exp(scores[tau] - mx);
    sum += scores[tau];
  }
  for (size_t tau = 0; tau < n_keys; ++tau) scores[tau] /= sum;  // probabilities, as softmax() returns

  std::fill(out, out + d, 0.0f);
  for (size_t tau = 0; tau < n_keys; ++tau) {
    const float p = scores[tau];
    const float* vt = head_values(kv.v_pool, kv.v_type, kv, row_stride, tau, head_off, d, row);
    for (size_t j = 0; j < d; ++j) out[j] += p * vt[j];
  }
}

}  // namespace

void attention_causal(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out,
                      ThreadPool* pool) {
  if (s.n_q_tokens == 0 || s.n_heads == 0) return;
  if (pool == nullptr) pool = default_pool();
  const size_t group = s.n_heads / s.n_kv_heads;     // query heads per kv head (grouped mapping)
  const size_t first_row = s.kv_len - s.n_q_tokens;  // cache row of query token 0

  // Work item i = (token t, head h) with i = t * n_heads + h.
  pool->parallel_for(s.n_q_tokens * s.n_heads, 1, [&](size_t begin, size_t end) {
    std::vector<float> scores(s.kv_len), row(s.head_dim);
    for (size_t i = begin; i < end; ++i) {
      const size_t t = i / s.n_heads, h = i % s.n_heads;
      const size_t g = h / group;
      const size_t n_keys = first_row + t + 1;  // causal: rows 0 .. first_row + t
      attend_one(q + t * s.q_token_stride + h * s.q_head_stride, kv, s.kv_row_stride, g * s.head_dim, n_keys,
                 s.head_dim, scale, scores.data(), row.data(), out + t * s.out_token_stride + h * s.head_dim);
    }
  });
}

AttentionShape batch_seq_shape(const AttentionBatch& b, size_t i) {
  const AttentionBatchSeq& q = b.seqs[i];
  return AttentionShape{q.n_q_tokens,    q.kv_len,        b.n_heads,
                        b.n_kv_heads,    b.head_dim,      b.n_heads * b.q_head_stride,
                        b.q_head_stride, b.kv_row_stride, b.n_heads * b.head_dim};
}

KvPages batch_seq_pages(const AttentionBatch& b, size_t i) {
  return KvPages{b.k_pool, b.v_pool, b.seqs[i].block_table, b.block_size, b.k_type, b.v_type};
}

void attention_batch(const AttentionBatch& b, ThreadPool* pool) {
  for (size_t i = 0; i < b.n_seqs; ++i) {
    attention_causal(batch_seq_shape(b, i), b.q + b.seqs[i].q_offset, batch_seq_pages(b, i), b.scale,
                     b.out + b.seqs[i].out_offset, pool);
  }
}

}  // namespace ds::cpu
