// The speculative-decoding acceptance rule, defined once like the sampling rule (the last
// stage applies it to draft from the accepted position; the coordinator re-checks it from the
// digests). Lossless: the emitted tokens are distributed exactly as plain sampling.
//
// Greedy (temperature <= 0): draft j is accepted while it equals the target's argmax of the
// row before it; the emitted token after the accepted prefix is the argmax of the next target
// row (the correction, or the bonus when every draft was accepted). Output is token for token
// the output without speculation.
//
// temperature > 0 (standard speculative sampling): with p = the rule's distribution of target
// row j and q = the draft's, draft d is accepted when u_accept[j] < p(d) / q(d); on the first
// rejection the token is drawn from the normalized residual max(0, p - q) with u_final; after
// all drafts are accepted it is sample_token(target row k, u_final).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/sampling.h"

namespace ds {

// The distribution sample_token draws from (top_k, top_p, temperature applied), dense over the
// vocabulary. Greedy: one-hot at the argmax.
std::vector<double> rule_distribution(const float* logits, size_t n_vocab, const SamplingRule& rule);

// Draws from a dense (not necessarily normalized) distribution: the first id whose cumulative
// mass exceeds u * total.
int32_t draw_from(const std::vector<double>& p, double u);

struct SpecVerdict {
  uint32_t accepted = 0;  // drafts accepted (a prefix)
  int32_t token = -1;     // the token emitted after them
};

// target: k + 1 logits rows (row j predicts the token after draft j, row 0 the first draft);
// drafts: k tokens; draft_dist: k distributions (temperature > 0 only; may be empty for greedy);
// u_accept: k uniform numbers; u_final: one.
SpecVerdict accept_drafts(const float* target, size_t n_vocab, const SamplingRule& rule,
                          const std::vector<int32_t>& drafts, const std::vector<std::vector<double>>& draft_dist,
                          const std::vector<double>& u_accept, double u_final);

}  // namespace ds
