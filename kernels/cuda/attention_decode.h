// Internal (not part of the public contract): the split-K ("flash-decoding") path behind
// ds::cuda::attention_causal for few query tokens (decode, MTP verify rows).
//
// The keys of each query token are cut into splits; one block per (split, kv head, token) scores
// its keys against all query heads of the GQA group (each K row is loaded once for the group),
// keeps an online softmax per head (running max, sum, weighted V) over sub-chunks of keys, and
// writes a partial (max, sum, acc[d]) per (token, head, split). A second kernel merges the
// splits. Same math as kernels/cpu/attention.cpp in f32; only the summation order differs.
// Every query token gets the split count and chunking it would get alone (a one-token call over
// its causal prefix), so a verify row's token has plain decoding's bits.
//
// attention_decode_batch runs the same kernels over a whole decode step: the grid's third
// dimension walks the sequences instead of one sequence's query tokens, and each sequence keeps
// the split count and chunking it would get alone, so its bits do not depend on the batch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

#include "kernels/cpu/attention.h"

namespace ds::cuda {

using cpu::AttentionBatch;
using cpu::AttentionBatchSeq;

// Copies `bytes` host bytes to the device, queued on the launch's stream (the host bytes may
// change once it returns), and returns the device copy, which must stay valid until the work
// queued after it has run; nullptr on failure. The CUDA backend passes its control buffer.
using DeviceUpload = std::function<const void*(const void* host, size_t bytes)>;

// True when the batched kernels take `b`'s head layout (GQA group <= 8, head_dim <= 256, as the
// one-sequence split-K path); otherwise run attention_causal per sequence.
bool attention_decode_batch_applies(const AttentionBatch& b);

// All sequences of `b` (q, out and the pools on the device; b.seqs and their block tables on the
// HOST) after ONE upload of a per-sequence descriptor array and all block tables, in one split
// launch and one merge launch (more only when the partials would pass 128 MiB of workspace or
// the batch passes 65535 sequences). Sequence i's output is bit-identical to
// attention_causal(batch_seq_shape(b, i), ...) alone. n_seqs == 0: nothing to do. Errors
// (before any work is queued): cudaErrorInvalidValue for null pointers, a shape the kernels do
// not take, kv_len 0 or >= 2^32, a sequence with n_q_tokens != 1 (the backend sends longer ones
// to attention_prefill_batch or attention_causal); cudaErrorMisalignedAddress for pointers not float-aligned.
cudaError_t attention_decode_batch(const AttentionBatch& b, const DeviceUpload& upload, cudaStream_t stream);

}  // namespace ds::cuda

namespace ds::cuda::detail {

// At most this many query tokens and query heads per kv head take the split-K path.
inline constexpr size_t kDecodeMaxQTokens = 8;
inline constexpr size_t kDecodeMaxGroup = 8;

// True when the split-K path handles `s` (few query tokens, group <= 8, head_dim <= 256).
bool attention_decode_applies(const cpu::AttentionShape& s);

// Arguments are checked by the caller (ds::cuda::attention_causal). Uses the per-stream
// workspace of matmul_fast.h for the partials.
cudaError_t attention_decode(const cpu::AttentionShape& s, const float* q, const cpu::KvPages& kv, float scale,
                             float* out, cudaStream_t stream);

}  // namespace ds::cuda::detail
