#include "kernels/cpu/digest.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ds::cpu {

LogitDigest logit_digest(const float* logits, size_t vocab, size_t k) {
  LogitDigest d;
  if (vocab == 0) return d;
  k = std::min(k, vocab);

  // Top-k: higher logit first, ties broken by the lower id; NaN ranks below everything.
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  auto key = [logits](int32_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
  auto better = [&key](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), better);
  d.top_ids.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k));
  for (int32_t id : d.top_ids) d.top_logits.push_back(logits[id]);

  // log(sum exp(x)) = max + log(sum exp(x - max)), all in double.
  double mx = logits[0];
  for (size_t i = 1; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (size_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  d.logsumexp = mx + std::log(sum);
  return d;
}

}  // namespace ds::cpu
