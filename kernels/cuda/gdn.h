// CUDA twins of kernels/cpu/gdn.h (Gated DeltaNet, one sequence) and of the backend's gate op.
// Same contract, layouts and strides as the CPU (see GdnShape there); all pointers on the device;
// state [n_v_heads][dk][dv] f32 updated in place. Status codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/gdn.h"  // GdnShape

namespace ds::cuda {

using cpu::GdnRawGates;
using cpu::GdnShape;

// Both forms run the exact token-by-token recurrence. For dk <= 128 (every real model) both use one
// 128-thread block per (value head, 16 value columns) with the state in registers, read and written
// once per call; the per-column sums over the key index are split over 8 row groups, so the f32
// rounding order differs from the CPU's. Larger dk falls back to one warp per 32 columns.
// Token-by-token recurrence (decode: 1 token).
cudaError_t gdn_recurrent(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                          const float* beta, float* state, float* out, cudaStream_t stream);

// Prefill form: the same exact recurrence with the state held in shared memory across all tokens
// (read and written back once). Falls back to gdn_recurrent when dk is too large for shared memory.
cudaError_t gdn_prefill(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                        const float* beta, float* state, float* out, cudaStream_t stream);

// A speculative verify row (Backend::gdn_captured): gdn_recurrent over s.n_tokens tokens in one
// launch that also writes the state after token t < n_captures to captures + t * capture_stride
// floats (the state's layout): the bits of one-token launches with a state copy after each.
// cudaErrorNotSupported for dk > 128 (the caller then goes token by token).
cudaError_t gdn_recurrent_captured(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                                   const float* beta, float* state, float* out, size_t n_captures, float* captures,
                                   size_t capture_stride, cudaStream_t stream);
// The same with token t's gates computed inside the launch from row t of `gates` (device
// pointers) instead of given as g / beta: bit-identical to gdn_gates then the form above, one
// launch fewer per verify row and GDN layer.
cudaError_t gdn_recurrent_captured(const GdnShape& s, const float* q, const float* k, const float* v,
                                   const GdnRawGates& gates, float* state, float* out, size_t n_captures,
                                   float* captures, size_t capture_stride, cudaStream_t stream);

// Decode of n_seqs sequences in one launch, one token each (s.n_tokens == 1): sequence i reads
// token row i of q / k (stride s.qk_token_stride), v (s.v_token_stride), g and beta (n_v_heads)
// and writes row i of out; its state is state0 + slots[i] * slot_stride floats (`slots` on the
// device). The same block kernel and bits as gdn_recurrent per sequence. Needs dk <= 128
// (gdn_decode_slots_applies); cudaErrorInvalidValue otherwise.
bool gdn_decode_slots_applies(const GdnShape& s, size_t n_seqs);
cudaError_t gdn_decode_slots(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                             const float* beta, float* state0, size_t slot_stride, const uint32_t* slots, size_t n_seqs,
                             float* out, cudaStream_t stream);
// The same with the gates computed inside the launch from their raw inputs (sequence i's alpha /
// beta_raw at row i of `gates`; device pointers) instead of g / beta: bit-identical to gdn_gates
// followed by the form above, one launch fewer.
cudaError_t gdn_decode_slots(const GdnShape& s, const float* q, const float* k, const float* v,
                             const GdnRawGates& gates, float* state0, size_t slot_stride, const uint32_t* slots,
                             size_t n_seqs, float* out, cudaStream_t stream);

// g = a * softplus(alpha + dt_bias), beta = sigmoid(beta_raw); inputs [n_tokens, nv] with row
// strides alpha_stride / beta_stride, outputs [n_tokens, nv] contiguous. The math is shared with
// the raw-gate gdn_decode_slots (same bits).
cudaError_t gdn_gates(const float* alpha, size_t alpha_stride, const float* beta_raw, size_t beta_stride,
                      const float* a, const float* dt_bias, size_t n_tokens, size_t nv, float* g, float* beta,
                      cudaStream_t stream);

}  // namespace ds::cuda
