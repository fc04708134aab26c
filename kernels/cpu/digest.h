// Logit digest: the top-k candidates and log-sum-exp of one logits row (f64 accumulation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ds::cpu {

struct LogitDigest {
  std::vector<int32_t> top_ids;  // best first; ties broken by the lower id
  std::vector<float> top_logits;
  double logsumexp = 0;
};

LogitDigest logit_digest(const float* logits, size_t vocab, size_t k);

}  // namespace ds::cpu
