// Partial rotary embedding with NEOX (half-split) pairing over the first n_rot dims of each
// head, and M-RoPE (interleaved sections) position selection (qwen35-model-spec.md §4.4).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ds::cpu {

// Rotates `x` in place: n_tokens x n_heads heads of `head_dim` floats; head h of token t starts
// at x + t*token_stride + h*head_stride. positions: [3][n_tokens] (t, h, w streams; text tokens
// use the same value in all three). Frequency slot i in [0, n_rot/2) uses theta^(-2i/n_rot) and
// takes its position from stream h if i%3==1 && i < 3*sections[1], from w if i%3==2 &&
// i < 3*sections[2], else t. With all sections zero, stream t is used everywhere (plain RoPE).
void rope_neox(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride, size_t head_dim,
               size_t n_rot, const int32_t* positions, std::array<int32_t, 4> sections, float theta);

// The vision tower's 2D rotary embedding (Qwen3-VL "axial"): NEOX pairing (z_i, z_{i+d/2}) over
// the whole head (head_dim = d, a multiple of 4); pair i < d/4 turns by row * f_i, pair i >= d/4 by
// col * f_{i-d/4}, with f_j = 1 / theta^(2j / (d/2)) in f32. positions: [2][n_tokens] (row
// stream, then column stream), the patch's place in its image. Throws std::invalid_argument when
// head_dim is not a multiple of 4.
void rope_2d(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride, size_t head_dim,
             const int32_t* positions, float theta);

}  // namespace ds::cpu
