// One decode token of a GDN layer's front end in one launch: the causal depthwise conv + SiLU of
// kernels/cuda/conv1d.h for a single token (state updated in place), then the per-head L2 norm
// of the q and k heads (the first n_norm_heads heads of head_dim channels). Replaces three
// launches (conv, state shift, L2) per GDN layer and sequence at decode. Same formulas as
// causal_conv1d_silu then l2_norm; only the L2 sum's f32 order differs.
// x: [channels] raw projections; weight: [channels][kernel]; state: [kernel-1][channels];
// y: [channels], must not alias x or state. channels a multiple of head_dim, head_dim <= 1024,
// n_norm_heads * head_dim <= channels. Status codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ds::cuda {

// True when conv_silu_l2_token takes these sizes (else use the separate ops).
bool conv_silu_l2_token_applies(size_t channels, size_t kernel, size_t n_norm_heads, size_t head_dim);

cudaError_t conv_silu_l2_token(const float* x, size_t channels, const float* weight, size_t kernel, float* state,
                               size_t n_norm_heads, size_t head_dim, float eps, float* y, cudaStream_t stream);

// A speculative verify row of n_tokens tokens (rows of x / y, `channels` apart) in one launch: the
// bits of one conv_silu_l2_token per token, and the window after token t < n_captures copied to
// captures + t * capture_stride floats (the state's layout). kernel >= 2.
cudaError_t conv_silu_l2_captured(const float* x, size_t channels, size_t n_tokens, const float* weight, size_t kernel,
                                  float* state, size_t n_norm_heads, size_t head_dim, float eps, float* y,
                                  size_t n_captures, float* captures, size_t capture_stride, cudaStream_t stream);

// n_seqs decode sequences in one launch: row i of x / y ([n_seqs][channels]) with the state at
// state0 + slots[i] * slot_stride floats (`slots` on the device). Same bits as one
// conv_silu_l2_token per sequence; kernel >= 2 (a state to update).
cudaError_t conv_silu_l2_slots(const float* x, size_t channels, const float* weight, size_t kernel, float* state0,
                               size_t slot_stride, const uint32_t* slots, size_t n_seqs, size_t n_norm_heads,
                               size_t head_dim, float eps, float* y, cudaStream_t stream);

}  // namespace ds::cuda
