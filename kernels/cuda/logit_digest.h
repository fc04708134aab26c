// The logit digest of common/sampling.h computed on the device, so a decode step downloads a
// few hundred bytes per row instead of the whole vocabulary (248K floats for Qwen3.5).
//
// Device part (logit_digest_rows): per row, the first `k` candidates in the rule's order
// (logit descending, ties -> lower id), the row's log-sum-exp (double, fixed reduction order:
// deterministic, equal to the CPU's sequential sum up to double rounding) and an "irregular"
// flag for rows the device cannot order the CPU's way (any NaN or +inf, or every logit -inf).
// Host part (finish_digest): the LogitDigest of one row from those candidates; sampling with
// top_k in [1, kDigestMaxCandidates] is exact because the rule only ever looks at the first
// top_k candidates. Rules that need the whole sorted row (temperature > 0 without top_k, or a
// top_k above the cap) are not device-digestible: digest_on_device_applies says so.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/logit_adjust.h"
#include "common/sampling.h"

namespace ds::cuda {

inline constexpr uint32_t kDigestMaxCandidates = 64;
// Vocabularies up to this size (every Qwen3.5 / 3.6 model: 248320); larger rows are digested on
// the host (logit_digest_rows refuses them).
inline constexpr size_t kDigestMaxVocab = 524288;

// One row's device result (downloaded as is).
struct DigestRow {
  int32_t ids[kDigestMaxCandidates];  // rule order; -1 past the row's end
  float logits[kDigestMaxCandidates];
  double logsumexp;
  int32_t irregular;   // 1: NaN / +inf present or no finite logit; the host must digest the full row
  float forced_logit;  // the logit of the row's forced id (fill_forced_logits), else 0
};

// True when a row with this rule can be digested from device candidates alone.
bool digest_on_device_applies(const SamplingRule& rule);

// Candidates a row needs for this rule: max(kDigestTopK, top_k when sampling).
uint32_t digest_candidates(const SamplingRule& rule);

// Device scratch (bytes) logit_digest_rows needs for these sizes.
size_t logit_digest_scratch_bytes(size_t n_rows, size_t n_vocab, uint32_t k);

// Digests rows [0, n_rows) of `logits` (row stride n_vocab) into out[0, n_rows) (device). k in
// [1, kDigestMaxCandidates]; `scratch` >= logit_digest_scratch_bytes, 8-byte aligned.
cudaError_t logit_digest_rows(const float* logits, size_t n_rows, size_t n_vocab, uint32_t k, void* scratch,
                              DigestRow* out, cudaStream_t stream);

// The CUDA twin of ds::apply_logit_edits (common/sampling.h), on device `logits` [n_rows,
// n_vocab] with device `edits`: one thread per edit, the same float multiply and add, so the same
// bits. The caller validates rows and ids (the kernel skips an edit outside the block).
cudaError_t apply_logit_edits(float* logits, size_t n_rows, size_t n_vocab, const LogitEdit* edits, size_t n_edits,
                              cudaStream_t stream);

// The CUDA twin of ds::apply_token_masks (common/token_mask.h): masked row i is device
// `rows`[i] and takes distinct mask `mask_of_row`[i] of device `bits` [n_distinct, n_words];
// every id whose bit is clear (or past n_words * 32) gets -inf. One thread per (row, id). The
// caller validates the masks.
cudaError_t apply_token_masks(float* logits, size_t n_vocab, const uint32_t* rows, const uint32_t* mask_of_row,
                              size_t n_masked, const uint32_t* bits, size_t n_words, cudaStream_t stream);

// rows[r].forced_logit = logits[r * n_vocab + forced[r]] for each row whose device `forced`
// id is >= 0 (prompt logprobs: the logprob of a given token, which may not be a candidate).
// The caller validates the ids.
cudaError_t fill_forced_logits(const float* logits, size_t n_rows, size_t n_vocab, const int32_t* forced,
                               DigestRow* rows, cudaStream_t stream);

// The LogitDigest of a regular row (irregular == 0) for `rule` and `u`, same values as
// ds::digest_logits up to the log-sum-exp's summation order. Requires digest_on_device_applies.
LogitDigest finish_digest(const DigestRow& row, size_t n_vocab, const SamplingRule& rule, double u);

}  // namespace ds::cuda
