#include "kernels/cpu/conv1d.h"

#include "kernels/cpu/activation.h"

namespace ds::cpu {

void causal_conv1d_silu(const float* x, size_t x_stride, size_t n_tokens, size_t channels, const float* weight,
                        size_t kernel, float* state, float* y) {
  if (kernel == 0) return;
  const size_t hist = kernel - 1;  // rows of state, oldest first
  // Raw input at time tau (state rows are times -hist .. -1), channel c.
  auto input = [&](long tau, size_t c) -> float {
    return tau < 0 ? state[static_cast<size_t>(tau + static_cast<long>(hist)) * channels + c]
                   : x[static_cast<size_t>(tau) * x_stride + c];
  };

  // y[t][c] = silu(sum_m w[c][m] * input(t - hist + m)), taps summed oldest first.
  for (size_t t = 0; t < n_tokens; ++t) {
    float* yt = y + t * channels;
    for (size_t c = 0; c < channels; ++c) {
      const float* wc = weight + c * kernel;
      float acc = 0.0f;
      for (size_t m = 0; m < kernel; ++m) acc += wc[m] * input(static_cast<long>(t + m) - static_cast<long>(hist), c);
      yt[c] = silu(acc);
    }
  }

  // New state row j = raw input at time n_tokens - hist + j. The source row (old state index
  // n_tokens + j, or a token) is never before the destination, so ascending j is safe in place.
  if (n_tokens == 0) return;
  for (size_t j = 0; j < hist; ++j) {
    const long tau = static_cast<long>(n_tokens + j) - static_cast<long>(hist);
    for (size_t c = 0; c < channels; ++c) state[j * channels + c] = input(tau, c);
  }
}

}  // namespace ds::cpu
