// The LM head as a block: final norm, the head product, the step's logit edits and grammar
// masks, then either the
// backend's digest of each row (a few hundred bytes per row come back) or the full rows.
//
// Rows go through the head at most kHeadRowsPerPass at a time: a prompt-logprobs chunk asks for
// a row per token, and 2,048 rows of a 248K vocabulary would be 2 GB of logits at once.
#pragma once

#include <cstddef>
#include <vector>

#include "common/logit_adjust.h"
#include "common/sampling.h"
#include "common/token_mask.h"
#include "worker/backend.h"
#include "worker/blocks/workspace.h"
#include "worker/stage_model.h"  // PendingTokenMasks

namespace ds {

inline constexpr size_t kHeadRowsPerPass = 256;

struct LmHeadWeights {
  const float* norm = nullptr;  // [D] final RMSNorm weight (device)
  WeightView head;              // [V, D]
  float rms_eps = 1e-6f;
};

struct LmHeadOutput {
  std::vector<float>* logits = nullptr;         // full rows [n_rows, V] when not digested (cleared when digested)
  std::vector<float>* normed = nullptr;         // optional: the normed rows [n_rows, D]
  std::vector<LogitDigest>* digests = nullptr;  // with digest requests: one per row, or cleared (full logits)
};

// `rows` [n_rows, D] (device). `digest_rows` (one per row, or null: full logits), `edits`
// (row indices into these rows, in row order; may be null) and `masks` (likewise; waited for
// only after the first head product is queued, so masks still on their way overlap the step).
// With more rows than one pass, a pass the backend cannot digest is digested on the host, so
// every row gets a digest.
void lm_head(Backend& be, Workspace& ws, const LmHeadWeights& w, const float* rows, size_t n_rows, size_t dim,
             const DigestRequest* digest_rows, const std::vector<LogitEdit>* edits, const LmHeadOutput& out,
             const PendingTokenMasks* masks = nullptr);

}  // namespace ds
