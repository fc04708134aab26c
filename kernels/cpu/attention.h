// Causal grouped-query softmax attention over a paged KV cache (spec §4.5-4.6).
//
// K and V live in pools of fixed-size blocks shared by all sequences; a sequence owns a block
// table: its cache row tau is row tau % block_size of pool block block_table[tau / block_size].
// A contiguous cache is the special case of one table entry per block in order (0, 1, 2, ...).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/kv_format.h"

namespace ds::cpu {

class ThreadPool;

struct AttentionShape {
  size_t n_q_tokens;      // new query tokens; they sit at cache rows kv_len-n_q_tokens .. kv_len-1
  size_t kv_len;          // rows valid in the cache, including the new tokens
  size_t n_heads;         // H query heads
  size_t n_kv_heads;      // Hkv; query head h reads kv head h / (H/Hkv)
  size_t head_dim;        // d
  size_t q_token_stride;  // floats between query tokens (head h at h*q_head_stride)
  size_t q_head_stride;
  size_t kv_row_stride;     // values per cache row (kv head g at g*head_dim within a row)
  size_t out_token_stride;  // out: [n_q_tokens, H, d]
};

// The sequence's view of the KV pools: [pool blocks][block_size] rows of kv_row_stride values,
// each row kv_row_bytes(type, kv_row_stride) bytes (common/kv_format.h); K and V may differ.
struct KvPages {
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  const int32_t* block_table = nullptr;  // ceil(kv_len / block_size) pool block ids
  size_t block_size = 0;                 // cache rows per block
  KvType k_type = KvType::kF32;
  KvType v_type = KvType::kF32;
};

// The pool row holding cache row `tau` (the one place that maps rows to pages; KV writes and the
// CUDA twin use it too, so reads and writes agree by construction). constexpr so device code may
// call it (kernels/cuda builds with --expt-relaxed-constexpr).
constexpr size_t kv_pool_row(const int32_t* block_table, size_t block_size, size_t tau) {
  return static_cast<size_t>(block_table[tau / block_size]) * block_size + tau % block_size;
}
// Offset of that row in units of row_stride (elements of an f32 pool, with row_stride values).
constexpr size_t kv_row_offset(const int32_t* block_table, size_t block_size, size_t row_stride, size_t tau) {
  return kv_pool_row(block_table, block_size, tau) * row_stride;
}

// out[t][h] = sum_tau softmax(q.k_tau * scale) v_tau over tau <= kv_len - n_q_tokens + t.
void attention_causal(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out,
                      ThreadPool* pool);

// ---- one step's attention over many sequences ------------------------------------------------------
// One sequence of a batch: n_q_tokens query tokens (1 for a decode row, a prefill chunk's length
// otherwise), causal within the chunk: they are its cache rows kv_len-n_q_tokens .. kv_len-1.
// Its query rows are consecutive (token t at q_offset + t * n_heads * q_head_stride), and so are
// its output rows (token t at out_offset + t * n_heads * head_dim), as a step's rows are laid out.
struct AttentionBatchSeq {
  size_t kv_len;               // cache rows, the new tokens included (>= n_q_tokens)
  size_t q_offset;             // floats from AttentionBatch::q to its first query row (head h at h*q_head_stride)
  size_t out_offset;           // floats from AttentionBatch::out to its first output row [H][d]
  const int32_t* block_table;  // ceil(kv_len / block_size) pool block ids
  size_t n_q_tokens = 1;       // its new query tokens (>= 1)
};

// N such sequences sharing the KV pools and the head layout: attention_causal once per sequence.
struct AttentionBatch {
  size_t n_heads, n_kv_heads, head_dim;
  size_t q_head_stride;  // floats between query heads of a row
  size_t kv_row_stride;  // values per cache row (the pools' rows are kv_row_bytes of their types)
  const void* k_pool;
  const void* v_pool;
  size_t block_size;
  float scale;
  const float* q;
  float* out;
  const AttentionBatchSeq* seqs;
  size_t n_seqs;
  KvType k_type = KvType::kF32;
  KvType v_type = KvType::kF32;
};

// Sequence i of `b` as the one-sequence op sees it (shape and pages): the one place that maps a
// batch entry to attention_causal's arguments, so every backend's per-sequence path agrees.
AttentionShape batch_seq_shape(const AttentionBatch& b, size_t i);
KvPages batch_seq_pages(const AttentionBatch& b, size_t i);

// The reference: attention_causal for each sequence in turn.
void attention_batch(const AttentionBatch& b, ThreadPool* pool);

}  // namespace ds::cpu
