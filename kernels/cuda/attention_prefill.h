// Causal grouped-query attention for PREFILL (many query tokens of one sequence) over the paged KV
// cache: the same contract as ds::cuda::attention_causal (kernels/cuda/attention.h; CPU twin
// cpu::attention_causal), computed flash-style: one block per (64 query tokens, query head) walks
// the key rows in tiles of 32 through shared memory with an online softmax, so every K/V row is
// read once per query tile instead of once per query token.
//
// f32 throughout (CUDA cores): scores, softmax and the weighted V sum round like the per-token
// kernel, only the summation order differs, so the f32 model tolerances hold unchanged.
// head_dim <= 256 (every Qwen3.5 size uses 256). Status codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "kernels/cuda/attention.h"         // AttentionShape, KvPages
#include "kernels/cuda/attention_decode.h"  // AttentionBatch, DeviceUpload

namespace ds::cuda {

inline constexpr size_t kAttentionPrefillMaxHeadDim = 256;
// Steps with at least this many query tokens of a sequence are worth the tiled kernel.
inline constexpr size_t kAttentionPrefillMinTokens = 16;

// Whether attention_prefill takes these arguments (head_dim % 4 == 0, 16-byte aligned pools and
// output, strides in whole float4s); otherwise use attention_causal.
bool attention_prefill_applies(const AttentionShape& s, const float* q, const KvPages& kv, const float* out);

cudaError_t attention_prefill(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out,
                              cudaStream_t stream);

// The same on bf16 tensor cores (mma.sync m16n8k16, f32 accumulation; sm_80 and later): q * scale,
// K, V and the softmax weights P are rounded to bf16 (relative 2^-9 each), scores, the running
// max/sum and the output accumulate in f32. For the backend's bf16 prefill mode. The sequence's
// K/V rows are gathered to bf16 scratch first (the per-stream workspace of matmul_fast.h).
// head_dim 64, 128 or 256 plus attention_prefill's conditions.
bool attention_prefill_tc_applies(const AttentionShape& s, const float* q, const KvPages& kv, const float* out);

cudaError_t attention_prefill_tc(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out,
                                 cudaStream_t stream);

// ---- many prefill sequences of one step ------------------------------------------------------------
// Whether sequence i of `b` takes attention_prefill_batch (its one-sequence shape passes
// attention_prefill_applies, or attention_prefill_tc_applies with tensor_cores, its block table on
// the host); otherwise run it through attention_causal.
bool attention_prefill_batch_applies(const AttentionBatch& b, size_t i, bool tensor_cores);

// The sequences b.seqs[which[0..n)] (each passing attention_prefill_batch_applies) after ONE
// upload of every tile descriptor and block table: one launch of the f32 kernel over a flattened
// list of (sequence, 64-query tile) x head, or with tensor_cores one batched bf16 gather of their
// K/V rows then one launch of the tensor-core kernel (more pairs only when the bf16 copies would
// pass 256 MiB of workspace). Each sequence's output has the bits of its one-sequence
// attention_prefill / attention_prefill_tc call (the same tile code). n == 0: nothing to do.
// cudaErrorInvalidValue (before any work is queued) for a sequence that does not apply, sizes or
// table offsets >= 2^32, or no upload.
cudaError_t attention_prefill_batch(const AttentionBatch& b, const size_t* which, size_t n, bool tensor_cores,
                                    const DeviceUpload& upload, cudaStream_t stream);

// A whole step's attention, routed per sequence: those passing attention_prefill_batch_applies
// (>= kAttentionPrefillMinTokens queries) through attention_prefill_batch (upload `prefill`);
// with decode_batched, the one-token sequences through attention_decode_batch (upload `decode`)
// when there are at least two and the head layout applies. The rest (a lone decode row, a few
// query tokens, a shape the tiled kernels refuse) is left in *rest (indices into b.seqs) for the
// caller's attention_causal. Errors as in those two launchers.
cudaError_t attention_batch(const AttentionBatch& b, bool tensor_cores, bool decode_batched,
                            const DeviceUpload& prefill, const DeviceUpload& decode, std::vector<size_t>* rest,
                            cudaStream_t stream);

}  // namespace ds::cuda

// Internal: what the batched launchers of attention_prefill.cu / attention_prefill_tc.cu take
// (packed on the host by attention_prefill_batch.cu).
namespace ds::cuda::detail {

inline constexpr size_t kPrefillTileRows = 64;  // query rows per block, both kernels

// One block's work: query tokens t0 .. t0+63 of a sequence (all heads: the grid's y).
struct PrefillTile {
  unsigned long long q_offset, out_offset;  // floats from the batch's q / out to the sequence's first row
  unsigned long long kv_base;               // tc: its cache row 0's row in the bf16 copies
  unsigned int kv_len, n_q, table, t0;      // table: its first entry in the uploaded tables
};

// One sequence's K/V rows for the batched bf16 gather.
struct PrefillGather {
  unsigned long long kv_base;  // its first row in the bf16 copies
  unsigned int kv_len, table;
};

struct PrefillBatchWork {
  AttentionShape shape;  // heads, head_dim and strides of the batch (n_q_tokens, kv_len unused)
  KvPages pools;         // block_table unused (per tile)
  const float* q;
  float* out;
  float scale;
  const PrefillTile* tiles;  // device
  size_t n_tiles;
  const int32_t* tables;  // device
};

cudaError_t launch_prefill_batch(const PrefillBatchWork& w, cudaStream_t stream);
// gathers[0..n_gathers) (device) into the bf16 copies (kv_rows rows, the longest max_kv_len), then
// the tiles, whose kv_base point into them.
cudaError_t launch_prefill_tc_batch(const PrefillBatchWork& w, const PrefillGather* gathers, size_t n_gathers,
                                    size_t kv_rows, size_t max_kv_len, cudaStream_t stream);

}  // namespace ds::cuda::detail
