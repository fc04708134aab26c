// Speculative acceptance (see speculative.h for the rule).
#include "common/speculative.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace ds {

std::vector<double> rule_distribution(const float* logits, size_t n_vocab, const SamplingRule& rule) {
  std::vector<double> p(n_vocab, 0.0);
  if (!(rule.temperature > 0.0f)) {
    p[static_cast<size_t>(argmax_token(logits, n_vocab))] = 1.0;
    return p;
  }
  // Same candidate order (logit descending, lower id first on ties), weights and top_p cut as
  // sample_token (sampling.cpp). This runs on the host for every verify row and every draft
  // of every sampled sequence, so sort only what a cut needs: the top_k first candidates,
  // nothing when neither top_k nor top_p cuts (the order then only changes the rounding of
  // the normalization).
  std::vector<int32_t> cand(n_vocab);
  std::iota(cand.begin(), cand.end(), 0);
  const auto before = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const bool top_p_cuts = rule.top_p > 0.0f && rule.top_p < 1.0f;
  const bool min_p_cuts = rule.min_p > 0.0f && rule.min_p <= 1.0f;
  if (rule.top_k > 0 && rule.top_k < n_vocab) {
    std::partial_sort(cand.begin(), cand.begin() + rule.top_k, cand.end(), before);
    cand.resize(rule.top_k);
  } else if (top_p_cuts || min_p_cuts) {
    std::sort(cand.begin(), cand.end(), before);
  } else {
    std::swap(cand[0], cand[static_cast<size_t>(argmax_token(logits, n_vocab))]);  // cand[0]: the max logit
  }
  const double max_logit = logits[cand[0]];
  const double inv_t = 1.0 / static_cast<double>(rule.temperature);
  std::vector<double> weight(cand.size());
  for (size_t i = 0; i < cand.size(); ++i)
    weight[i] = std::exp((static_cast<double>(logits[cand[i]]) - max_logit) * inv_t);
  const size_t kept = min_p_prefix(weight.data(), cand.size(), rule.min_p);
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) total += weight[i];
  const double target = top_p_cuts ? static_cast<double>(rule.top_p) * total : total;
  double mass = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    p[static_cast<size_t>(cand[i])] = weight[i];
    mass += weight[i];
    if (mass >= target) break;
  }
  for (double& x : p) x /= mass;
  return p;
}

int32_t draw_from(const std::vector<double>& p, double u) {
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  const double target = std::clamp(u, 0.0, 1.0) * total;
  double acc = 0.0;
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0.0) continue;
    acc += p[i];
    last = static_cast<int32_t>(i);
    if (acc > target) return last;
  }
  return last;
}

SpecVerdict accept_drafts(const float* target, size_t n_vocab, const SamplingRule& rule,
                          const std::vector<int32_t>& drafts, const std::vector<std::vector<double>>& draft_dist,
                          const std::vector<double>& u_accept, double u_final) {
  const size_t k = drafts.size();
  const bool greedy = !(rule.temperature > 0.0f);
  if (u_accept.size() != k || (!greedy && draft_dist.size() != k)) {
    throw std::invalid_argument("accept_drafts: drafts, distributions and random numbers differ in count");
  }
  SpecVerdict v;
  for (size_t j = 0; j < k; ++j) {
    const float* row = target + j * n_vocab;
    if (greedy) {
      const int32_t best = argmax_token(row, n_vocab);
      if (best != drafts[j]) return {static_cast<uint32_t>(j), best};
      continue;
    }
    const std::vector<double> p = rule_distribution(row, n_vocab, rule);
    const std::vector<double>& q = draft_dist[j];
    const auto d = static_cast<size_t>(drafts[j]);
    // q(d) > 0 always: d was drawn from q. Accept with probability min(1, p/q).
    if (u_accept[j] * q[d] < p[d]) continue;
    std::vector<double> residual(n_vocab);
    for (size_t i = 0; i < n_vocab; ++i) residual[i] = std::max(0.0, p[i] - q[i]);
    return {static_cast<uint32_t>(j), draw_from(residual, u_final)};
  }
  v.accepted = static_cast<uint32_t>(k);
  v.token = sample_token(target + k * n_vocab, n_vocab, rule, u_final);
  return v;
}

}  // namespace ds
