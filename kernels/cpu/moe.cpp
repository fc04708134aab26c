#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace ds::cpu {

void moe_route(const float* logits, size_t n_tokens, size_t n_experts, size_t k, int32_t* experts, float* weights) {
  std::vector<float> p(n_experts);
  std::vector<int32_t> order(n_experts);
  for (size_t t = 0; t < n_tokens; ++t) {
    const float* l = logits + t * n_experts;
    const float mx = *std::max_element(l, l + n_experts);
    float sum = 0.0f;
    for (size_t e = 0; e < n_experts; ++e) sum += p[e] = std::exp(l[e] - mx);
    for (size_t e = 0; e < n_experts; ++e) p[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float picked = 0.0f;
    for (size_t j = 0; j < k; ++j) picked += p[order[j]];
    for (size_t j = 0; j < k; ++j) {
      experts[t * k + j] = order[j];
      weights[t * k + j] = p[order[j]] / picked;
    }
  }
}

}  // namespace ds::cpu
