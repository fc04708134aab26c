// Causal depthwise conv1d with carried state, then SiLU (qwen35-model-spec.md §5.2).
#pragma once

#include <cstddef>

namespace ds::cpu {

// x: [n_tokens, channels] raw projections (row stride x_stride). weight: [channels][kernel]
// (ggml [kernel, channels], tap kernel-1 multiplies the current token, tap 0 the oldest).
// state: [kernel-1][channels], the previous kernel-1 raw inputs, oldest first; updated to the
// last kernel-1 raw inputs (including older state when n_tokens < kernel-1).
// y: [n_tokens, channels] = silu(conv). y must not alias x.
void causal_conv1d_silu(const float* x, size_t x_stride, size_t n_tokens, size_t channels, const float* weight,
                        size_t kernel, float* state, float* y);

}  // namespace ds::cpu
