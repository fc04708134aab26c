#include "worker/blocks/lm_head.h"

#include <algorithm>

namespace ds {

namespace {

// The edits of rows [first, first + n), rebased to the pass (edits come in row order).
std::vector<LogitEdit> pass_edits(const std::vector<LogitEdit>& edits, size_t first, size_t n) {
  const auto by_row = [](const LogitEdit& e, size_t row) { return e.row < row; };
  const auto lo = std::lower_bound(edits.begin(), edits.end(), first, by_row);
  const auto hi = std::lower_bound(lo, edits.end(), first + n, by_row);
  std::vector<LogitEdit> out(lo, hi);
  for (LogitEdit& e : out) e.row -= static_cast<uint32_t>(first);
  return out;
}

}  // namespace

void lm_head(Backend& be, Workspace& ws, const LmHeadWeights& w, const float* rows, size_t n_rows, size_t dim,
             const DigestRequest* digest_rows, const std::vector<LogitEdit>* edits, const LmHeadOutput& out,
             const PendingTokenMasks* masks) {
  const size_t V = w.head.rows;
  const bool single = n_rows <= kHeadRowsPerPass;
  const bool want_digests = digest_rows != nullptr && out.digests != nullptr;
  if (want_digests) out.digests->assign(n_rows, LogitDigest{});
  if (out.normed != nullptr) out.normed->resize(n_rows * dim);
  bool all_digested = want_digests;
  std::vector<float> host_pass;
  for (size_t first = 0; first < n_rows; first += kHeadRowsPerPass) {
    const size_t n = std::min(kHeadRowsPerPass, n_rows - first);
    float* normed = ws.get(Slot::kHeadNorm, n * dim);
    float* logits = ws.get(Slot::kLogits, n * V);
    be.rms_norm(rows + first * dim, dim, w.norm, w.rms_eps, n, dim, normed, dim);
    be.matmul(w.head, normed, dim, n, logits, V);
    if (edits != nullptr && !edits->empty()) {
      const std::vector<LogitEdit> mine = single ? std::vector<LogitEdit>{} : pass_edits(*edits, first, n);
      const std::vector<LogitEdit>& e = single ? *edits : mine;
      if (!e.empty()) be.edit_logits(logits, n, V, e.data(), e.size());
    }
    if (const TokenMasks* all = masks != nullptr ? &masks->get() : nullptr; all != nullptr && !all->empty()) {
      if (single) {
        be.mask_logits(logits, n, V, *all);
      } else if (const TokenMasks mine = slice_token_masks(*all, first, n); !mine.empty()) {
        be.mask_logits(logits, n, V, mine);
      }
    }
    if (out.normed != nullptr) be.download(out.normed->data() + first * dim, normed, n * dim);
    bool digested = false;
    if (want_digests) {
      digested = be.digest_logits_rows(logits, n, V, digest_rows + first, out.digests->data() + first);
      if (!digested && !single) {  // host digest of this pass: every row keeps one
        host_pass.resize(n * V);
        be.download(host_pass.data(), logits, n * V);
        for (size_t r = 0; r < n; ++r) {
          (*out.digests)[first + r] = digest_request(host_pass.data() + r * V, V, digest_rows[first + r]);
        }
        digested = true;
      }
    }
    all_digested = all_digested && digested;
    if (!digested) {
      out.logits->resize(n_rows * V);
      be.download(out.logits->data() + first * V, logits, n * V);
    }
  }
  if (all_digested) {
    out.logits->clear();
  } else if (out.digests != nullptr) {
    out.digests->clear();
  }
}

}  // namespace ds
