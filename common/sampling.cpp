// The sampling rule and logit digest (see sampling.h for the rule itself).
#include "common/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace ds {
namespace {

// Descending logit, ties -> lower id: the one candidate order of the rule.
struct ByLogitDesc {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const {
    if (logits[a] != logits[b]) return logits[a] > logits[b];
    return a < b;
  }
};

// The first `k` candidates in rule order (all of them when k == 0 or k >= n_vocab).
std::vector<int32_t> ordered_candidates(const float* logits, size_t n_vocab, size_t k) {
  std::vector<int32_t> ids(n_vocab);
  for (size_t i = 0; i < n_vocab; ++i) ids[i] = static_cast<int32_t>(i);
  if (k == 0 || k >= n_vocab) {
    std::sort(ids.begin(), ids.end(), ByLogitDesc{logits});
    return ids;
  }
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), ByLogitDesc{logits});
  ids.resize(k);
  return ids;
}

void check_row(const float* logits, size_t n_vocab) {
  if (logits == nullptr || n_vocab == 0) throw std::invalid_argument("sampling: empty logits row");
}

}  // namespace

int32_t argmax_token(const float* logits, size_t n_vocab) {
  check_row(logits, n_vocab);
  size_t best = 0;
  // Strict '>' keeps the lowest id among equal maxima. NaN never wins a comparison.
  for (size_t i = 1; i < n_vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

size_t min_p_prefix(const double* weight, size_t n, float min_p) {
  if (!(min_p > 0.0f && min_p <= 1.0f)) return n;
  size_t kept = 1;  // the top candidate (weight 1) always stays
  while (kept < n && weight[kept] >= static_cast<double>(min_p)) ++kept;
  return kept;
}

int32_t sample_token(const float* logits, size_t n_vocab, const SamplingRule& params, double u) {
  check_row(logits, n_vocab);
  if (!(params.temperature > 0.0f)) return argmax_token(logits, n_vocab);
  const std::vector<int32_t> cand = ordered_candidates(logits, n_vocab, params.top_k);
  const double max_logit = logits[cand[0]];
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  std::vector<double> weight(cand.size());
  double total = 0.0;
  for (size_t i = 0; i < cand.size(); ++i) {
    weight[i] = std::exp((static_cast<double>(logits[cand[i]]) - max_logit) * inv_t);
    total += weight[i];
  }
  size_t kept = min_p_prefix(weight.data(), cand.size(), params.min_p);
  if (kept < cand.size())
    total = std::accumulate(weight.begin(), weight.begin() + static_cast<std::ptrdiff_t>(kept), 0.0);
  if (params.top_p > 0.0f && params.top_p < 1.0f) {
    const double target = static_cast<double>(params.top_p) * total;
    double mass = 0.0;
    for (size_t i = 0; i < kept; ++i) {
      mass += weight[i];
      if (mass >= target) {
        kept = i + 1;
        break;
      }
    }
    total = mass;
  }
  const double clamped_u = std::clamp(u, 0.0, 1.0);
  const double target = clamped_u * total;
  double acc = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    acc += weight[i];
    if (acc > target) return cand[i];
  }
  return cand[kept - 1];  // u == 1 or rounding: the last kept candidate
}

LogitDigest digest_logits(const float* logits, size_t n_vocab, const SamplingRule& params, double u, uint32_t top_k) {
  check_row(logits, n_vocab);
  LogitDigest d;
  const size_t k = std::min<size_t>(top_k, n_vocab);
  if (k > 0) d.top_ids = ordered_candidates(logits, n_vocab, k);
  const double max_logit = logits[argmax_token(logits, n_vocab)];
  double sum = 0.0;
  for (size_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  d.logsumexp = max_logit + std::log(sum);
  d.top_logprobs.reserve(d.top_ids.size());
  for (int32_t id : d.top_ids) d.top_logprobs.push_back(static_cast<float>(logits[id] - d.logsumexp));
  d.token = sample_token(logits, n_vocab, params, u);
  d.token_logprob = static_cast<float>(static_cast<double>(logits[d.token]) - d.logsumexp);
  return d;
}

void force_token(LogitDigest* d, int32_t forced, float forced_logit) {
  d->token = forced;
  d->token_logprob = static_cast<float>(static_cast<double>(forced_logit) - d->logsumexp);
}

LogitDigest digest_request(const float* logits, size_t n_vocab, const DigestRequest& request) {
  LogitDigest d = digest_logits(logits, n_vocab, request.rule, request.u);
  if (request.forced >= 0) {
    if (static_cast<size_t>(request.forced) >= n_vocab)
      throw std::invalid_argument("forced token outside the vocabulary");
    force_token(&d, request.forced, logits[request.forced]);
  }
  return d;
}

}  // namespace ds
