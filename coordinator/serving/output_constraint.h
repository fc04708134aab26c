// One request's structured-output state as the engine drives it: a grammar Matcher advanced by
// every emitted token, and the token masks of a scheduled row's logit rows (the row after the
// emitted tokens, then one per unverified draft: each draft's mask is the matcher's state after
// the drafts before it; the matcher is rolled back afterwards, since the verdict is not known).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "coordinator/serving/generation.h"

namespace ds {

namespace structured {
class Matcher;
}  // namespace structured

struct SeqRequest;

class OutputConstraintState {
 public:
  explicit OutputConstraintState(const OutputConstraint& c);
  ~OutputConstraintState();
  OutputConstraintState(OutputConstraintState&&) noexcept;
  OutputConstraintState& operator=(OutputConstraintState&&) noexcept;

  // Sets r's mask columns for its last n_drafts + 1 logit rows (the verify rows; drafts are
  // r.tokens' last n_drafts). Rows before the grammar starts stay free. A row after a draft the
  // grammar refuses gets its predecessor's mask (the draft is rejected there, so the row's
  // token is never emitted). A first row the vocabulary cannot continue stays free: the token
  // it samples is then refused by accept().
  // The matcher is left as it was.
  void fill_masks(uint32_t n_drafts, SeqRequest* r);
  // Advances over an emitted token. False when the grammar refuses it.
  bool accept(int32_t token);
  // The grammar is complete: nothing but the end of generation can follow.
  bool complete() const;

 private:
  std::unique_ptr<structured::Matcher> matcher_;
  uint32_t n_words_ = 0;
  int32_t starts_after_ = -1;
  bool live_ = false;
};

}  // namespace ds
