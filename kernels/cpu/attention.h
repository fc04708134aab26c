// Causal grouped-query softmax attention over a per-sequence KV cache (spec §4.5-4.6).
#pragma once

#include <cstddef>

namespace ds::cpu {

class ThreadPool;

struct AttentionShape {
  size_t n_q_tokens;   // new query tokens; they sit at cache rows kv_len-n_q_tokens .. kv_len-1
  size_t kv_len;       // rows valid in the cache, including the new tokens
  size_t n_heads;      // H query heads
  size_t n_kv_heads;   // Hkv; query head h reads kv head h / (H/Hkv)
  size_t head_dim;     // d
  size_t q_token_stride;  // floats between query tokens (head h at h*q_head_stride)
  size_t q_head_stride;
  size_t kv_row_stride;   // floats between cache rows (kv head g at g*head_dim within a row)
  size_t out_token_stride;  // out: [n_q_tokens, H, d]
};

// out[t][h] = sum_tau softmax(q.k_tau * scale) v_tau over tau <= kv_len - n_q_tokens + t.
void attention_causal(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache, float scale,
                      float* out, ThreadPool* pool);

}  // namespace ds::cpu
