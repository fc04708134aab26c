#include "kernels/cpu/rope.h"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace ds::cpu {
namespace {

// Which position stream (0 = t, 1 = h, 2 = w) frequency slot i reads (IMROPE interleaving).
size_t stream_of_slot(size_t i, const std::array<int32_t, 4>& sections) {
  const size_t sh = sections[1] > 0 ? static_cast<size_t>(sections[1]) : 0;
  const size_t sw = sections[2] > 0 ? static_cast<size_t>(sections[2]) : 0;
  if (i % 3 == 1 && i < 3 * sh) return 1;
  if (i % 3 == 2 && i < 3 * sw) return 2;
  return 0;
}

// NEOX pairing (z_i, z_{i+half}) -> (a cos - b sin, b cos + a sin) on every head of one token.
void rotate_neox_heads(float* token, size_t n_heads, size_t head_stride, size_t half, const std::vector<float>& cos_v,
                       const std::vector<float>& sin_v) {
  for (size_t h = 0; h < n_heads; ++h) {
    float* z = token + h * head_stride;
    for (size_t i = 0; i < half; ++i) {
      const float a = z[i], b = z[i + half];
      z[i] = a * cos_v[i] - b * sin_v[i];
      z[i + half] = b * cos_v[i] + a * sin_v[i];
    }
  }
}

}  // namespace

// Angles follow the transformers reference bit for bit where it matters: inv_freq in f32 as
// 1 / theta^(2i/n_rot), angle = f32(position) * inv_freq in f32, then f32 cos/sin.
void rope_neox(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride, size_t head_dim,
               size_t n_rot, const int32_t* positions, std::array<int32_t, 4> sections, float theta) {
  (void)head_dim;  // dims n_rot .. head_dim-1 pass through
  const size_t half = n_rot / 2;
  std::vector<float> inv_freq(half);
  std::vector<size_t> stream(half);
  for (size_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(n_rot);
    inv_freq[i] = 1.0f / std::pow(theta, exponent);
    stream[i] = stream_of_slot(i, sections);
  }

  std::vector<float> cos_v(half), sin_v(half);
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t i = 0; i < half; ++i) {
      const float pos = static_cast<float>(positions[stream[i] * n_tokens + t]);
      const float angle = pos * inv_freq[i];
      cos_v[i] = std::cos(angle);
      sin_v[i] = std::sin(angle);
    }
    rotate_neox_heads(x + t * token_stride, n_heads, head_stride, half, cos_v, sin_v);
  }
}

// The same f32 angle recipe as rope_neox, over the 2D table Qwen3-VL builds: d/4 frequencies
// 1 / theta^(2j / (d/2)), the first d/4 pairs turned by the patch's row, the next d/4 by its column
// (cos = cat(row f, col f) repeated over both NEOX halves).
void rope_2d(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride, size_t head_dim,
             const int32_t* positions, float theta) {
  if (head_dim % 4 != 0) throw std::invalid_argument("rope_2d: head_dim must be a multiple of 4");
  const size_t half = head_dim / 2, quarter = head_dim / 4;
  std::vector<float> inv_freq(quarter);
  for (size_t j = 0; j < quarter; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(half);
    inv_freq[j] = 1.0f / std::pow(theta, exponent);
  }

  std::vector<float> cos_v(half), sin_v(half);
  for (size_t t = 0; t < n_tokens; ++t) {
    const float row = static_cast<float>(positions[t]);
    const float col = static_cast<float>(positions[n_tokens + t]);
    for (size_t i = 0; i < half; ++i) {
      const float angle = i < quarter ? row * inv_freq[i] : col * inv_freq[i - quarter];
      cos_v[i] = std::cos(angle);
      sin_v[i] = std::sin(angle);
    }
    rotate_neox_heads(x + t * token_stride, n_heads, head_stride, half, cos_v, sin_v);
  }
}

}  // namespace ds::cpu
