#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/activation.h"

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
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    float picked = 0.0f;
    for (size_t j = 0; j < k; ++j) picked += p[order[j]];
    for (size_t j = 0; j < k; ++j) {
      experts[t * k + j] = order[j];
      weights[t * k + j] = p[order[j]] / picked;
    }
  }
}

namespace {

// The step's (token, slot) pairs p = t * k + j grouped by expert, each group in pair order:
// pairs[first[e] .. first[e + 1]).
struct PairsByExpert {
  std::vector<size_t> first;
  std::vector<uint32_t> pairs;
};

PairsByExpert group_pairs(const MoeExperts& m) {
  const size_t P = m.n_tokens * m.k, E = m.n_experts;
  PairsByExpert g;
  g.first.assign(E + 1, 0);
  for (size_t p = 0; p < P; ++p) {
    const int32_t e = m.experts[p];
    if (e < 0 || static_cast<size_t>(e) >= E) {
      throw std::invalid_argument("moe_experts: expert id " + std::to_string(e) + " outside [0, " + std::to_string(E) +
                                  ")");
    }
    ++g.first[static_cast<size_t>(e) + 1];
  }
  std::partial_sum(g.first.begin(), g.first.end(), g.first.begin());
  std::vector<size_t> next(g.first.begin(), g.first.end() - 1);
  g.pairs.resize(P);
  for (size_t p = 0; p < P; ++p) g.pairs[next[static_cast<size_t>(m.experts[p])]++] = static_cast<uint32_t>(p);
  return g;
}

// Expert e's output rows for its pairs into parts[p] ([P][D]).
void run_expert(const MoeExperts& m, size_t e, const uint32_t* pairs, size_t n, ThreadPool* pool, float* parts) {
  const size_t D = m.dim(), F = m.ffn();
  std::vector<float> in(n * D), gate(n * F), up(n * F), out(n * D);
  for (size_t i = 0; i < n; ++i) std::memcpy(&in[i * D], m.x + (pairs[i] / m.k) * D, D * sizeof(float));
  matmul(row_range(m.gate_exps, e * F, F), in.data(), D, n, gate.data(), F, pool);
  matmul(row_range(m.up_exps, e * F, F), in.data(), D, n, up.data(), F, pool);
  swiglu(gate.data(), up.data(), n * F, gate.data());
  matmul(row_range(m.down_exps, e * D, D), gate.data(), F, n, out.data(), D, pool);
  for (size_t i = 0; i < n; ++i) std::memcpy(parts + size_t{pairs[i]} * D, &out[i * D], D * sizeof(float));
}

}  // namespace

void moe_experts(const MoeExperts& m, ThreadPool* pool) {
  if (const char* why = moe_experts_problem(m)) throw std::invalid_argument(std::string("moe_experts: ") + why);
  if (m.n_tokens == 0) return;
  const size_t T = m.n_tokens, k = m.k, D = m.dim();
  const PairsByExpert g = group_pairs(m);
  std::vector<float> parts(T * k * D);
  for (size_t e = 0; e < m.n_experts; ++e) {
    const size_t n = g.first[e + 1] - g.first[e];
    if (n != 0) run_expert(m, e, g.pairs.data() + g.first[e], n, pool, parts.data());
  }
  // The slots in order j = 0, 1, ..., then the shared expert: one fixed order per element.
  for (size_t t = 0; t < T; ++t) {
    float* y = m.y + t * D;
    std::fill(y, y + D, 0.0f);
    for (size_t j = 0; j < k; ++j) {
      const float w = m.weights[t * k + j];
      const float* part = parts.data() + (t * k + j) * D;
      for (size_t i = 0; i < D; ++i) y[i] += w * part[i];
    }
    if (m.shared == nullptr) continue;
    const float s = sigmoid(m.shared_gate[t]);
    for (size_t i = 0; i < D; ++i) y[i] += s * m.shared[t * D + i];
  }
}

}  // namespace ds::cpu
