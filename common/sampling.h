// The sampling rule, defined once for every process (coordinator, CPU and CUDA workers), and
// the logit digest the last pipeline stage returns instead of a full logits row.
//
// Rule: temperature <= 0 is greedy (argmax, ties -> lowest id). Otherwise the candidates are
// ordered by logit, descending (ties -> lower id); top_k keeps the first k (0 = all); the
// weights are exp((logit - max) / temperature); min_p keeps the prefix whose weights are at least
// min_p (a candidate's probability relative to the top one's: the weights are sorted, so this is a
// prefix of at least one token); top_p keeps the shortest prefix of those whose mass
// reaches top_p of their total (at least one token); the token is the first candidate whose
// cumulative weight exceeds u * (kept total), u in [0, 1). All arithmetic is double, in this
// fixed order, so any implementation that follows it picks the same token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ds {

struct SamplingRule {
  float temperature = 0.0f;  // 0 = greedy
  uint32_t top_k = 0;        // 0 = no limit
  float top_p = 1.0f;        // outside (0, 1) = no limit
  float min_p = 0.0f;        // outside (0, 1] = no limit
};

// The number of leading candidates (weights sorted descending, weight[0] == 1) min_p keeps.
size_t min_p_prefix(const double* weight, size_t n, float min_p);

// Picks a token from one logits row `logits[0, n_vocab)` for the uniform number u.
int32_t sample_token(const float* logits, size_t n_vocab, const SamplingRule& params, double u);

// Index of the largest logit (ties -> lowest id).
int32_t argmax_token(const float* logits, size_t n_vocab);

// Top-k candidates of a logits row with their log-probabilities, plus the row's log-sum-exp.
struct LogitDigest {
  std::vector<int32_t> top_ids;     // best first; ties -> lower id
  std::vector<float> top_logprobs;  // logit - logsumexp, same order
  double logsumexp = 0.0;           // over the whole row, unscaled
  int32_t token = -1;               // sample_token(...) for the row's u
  float token_logprob = 0.0f;       // log-probability of `token` (logit - logsumexp)
};

constexpr uint32_t kDigestTopK = 16;

// What a row's digest needs besides its logits: the sequence's rule and the row's uniform u.
// `forced` >= 0 (prompt logprobs): the row's token is that id, not a sample; its logprob is
// reported as any token's (the rule is then greedy, so every backend can digest the row).
struct DigestRequest {
  SamplingRule rule;
  double u = 0.0;
  int32_t forced = -1;
};

LogitDigest digest_logits(const float* logits, size_t n_vocab, const SamplingRule& params, double u,
                          uint32_t top_k = kDigestTopK);
// digest_logits for one request; a forced row's token is the forced id.
LogitDigest digest_request(const float* logits, size_t n_vocab, const DigestRequest& request);
// Makes `d` report `forced` (whose logit is `forced_logit`) as its token.
void force_token(LogitDigest* d, int32_t forced, float forced_logit);

}  // namespace ds
