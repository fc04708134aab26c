#include "coordinator/serving/output_constraint.h"

#include <algorithm>

#include "coordinator/engine/engine.h"
#include "coordinator/structured/matcher.h"
#include "coordinator/structured/token_trie.h"

namespace ds {

OutputConstraintState::OutputConstraintState(const OutputConstraint& c)
    : matcher_(std::make_unique<structured::Matcher>(c.grammar, c.vocab)),
      n_words_(static_cast<uint32_t>(c.vocab->n_words())),
      starts_after_(c.starts_after),
      live_(c.starts_after < 0) {}

OutputConstraintState::~OutputConstraintState() = default;
OutputConstraintState::OutputConstraintState(OutputConstraintState&&) noexcept = default;
OutputConstraintState& OutputConstraintState::operator=(OutputConstraintState&&) noexcept = default;

bool OutputConstraintState::accept(int32_t token) {
  if (!live_) {
    live_ = token == starts_after_;
    return true;
  }
  return matcher_->accept_token(token);
}

bool OutputConstraintState::complete() const {
  return live_ && matcher_->terminated();
}

void OutputConstraintState::fill_masks(uint32_t n_drafts, SeqRequest* r) {
  const uint32_t n_rows = n_drafts + 1;
  const uint32_t first = static_cast<uint32_t>(r->logit_rows.size()) - n_rows;
  const int32_t* drafts = r->tokens.data() + r->tokens.size() - n_drafts;
  r->mask_rows.clear();
  r->mask_bits.clear();
  r->mask_words = n_words_;
  r->mask_bits.reserve(static_cast<size_t>(n_rows) * n_words_);
  bool live = live_;
  bool refused = false;  // a draft before this row is not in the grammar
  size_t advanced = 0;
  for (uint32_t j = 0; j < n_rows; ++j) {
    if (live) {
      const size_t at = r->mask_bits.size();
      r->mask_bits.resize(at + n_words_);
      uint32_t* mask = r->mask_bits.data() + at;
      bool any = false;
      if (!refused) {
        matcher_->fill_mask(mask);
        any = std::any_of(mask, mask + n_words_, [](uint32_t w) { return w != 0; });
      }
      if (!any && r->mask_rows.empty()) {  // nothing can follow: left free (see the header)
        r->mask_bits.resize(at);
        break;
      }
      if (!any) std::copy_n(mask - n_words_, n_words_, mask);  // a row whose token is never emitted
      r->mask_rows.push_back(first + j);
    }
    if (j == n_drafts) break;
    if (!live) {
      live = drafts[j] == starts_after_;
    } else if (!refused) {
      refused = !matcher_->accept_token(drafts[j]);
      advanced += refused ? 0 : 1;
    }
  }
  matcher_->rollback(advanced);
  if (r->mask_rows.empty()) r->mask_words = 0;
}

}  // namespace ds
