#include "common/logit_adjust.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace ds {

void apply_logit_edits(float* logits, size_t n_rows, size_t n_vocab, const LogitEdit* edits, size_t n_edits) {
  for (size_t i = 0; i < n_edits; ++i) {
    const LogitEdit& e = edits[i];
    if (e.row >= n_rows || e.id < 0 || static_cast<size_t>(e.id) >= n_vocab) {
      throw std::invalid_argument("logit edit outside the logits block");
    }
    float& l = logits[e.row * n_vocab + static_cast<size_t>(e.id)];
    l = (l > 0.0f ? l * e.scale_pos : l * e.scale_neg) + e.add;
  }
}

void TokenHistory::reset(const std::vector<int32_t>& tokens) {
  tokens_ = tokens;
  counted_ = 0;
  counts_.clear();
}

// step +1 counts position `pos`, -1 uncounts it (it was counted before).
void TokenHistory::add(uint32_t pos, int step) {
  const int32_t id = tokens_[pos];
  const uint32_t generated = pos >= prompt_len_ ? 1 : 0;
  auto it = std::lower_bound(counts_.begin(), counts_.end(), id, [](const IdCount& c, int32_t v) { return c.id < v; });
  if (step > 0) {
    if (it == counts_.end() || it->id != id) it = counts_.insert(it, IdCount{id, 0, 0});
    ++it->all;
    it->generated += generated;
    return;
  }
  if (it == counts_.end() || it->id != id) return;
  --it->all;
  it->generated -= generated;
  if (it->all == 0) counts_.erase(it);
}

void TokenHistory::write(uint32_t start, const int32_t* tokens, size_t n) {
  if (start > tokens_.size()) {
    throw std::invalid_argument("token history: position " + std::to_string(start) + " follows unknown positions (" +
                                std::to_string(tokens_.size()) + " known)");
  }
  while (counted_ > start) add(--counted_, -1);
  tokens_.resize(start);
  tokens_.insert(tokens_.end(), tokens, tokens + n);
}

void TokenHistory::count_to(uint32_t end) {
  if (end > tokens_.size()) throw std::invalid_argument("token history: counting past the known positions");
  while (counted_ > end) add(--counted_, -1);
  while (counted_ < end) add(counted_++, +1);
}

namespace {

// The penalty edits of one row, one per id the history holds (repetition: every id seen;
// frequency / presence: the generated ones), sorted by id.
void penalty_edits(const LogitAdjust& a, const TokenHistory& h, uint32_t row, std::vector<LogitEdit>* out) {
  const bool additive = a.frequency_penalty != 0.0f || a.presence_penalty != 0.0f;
  const bool repeats = a.repetition_penalty != 1.0f;
  // Division by the penalty as one multiply by its inverse: within 1 ulp of llama.cpp's
  // `l / penalty`, and the same bits on every backend.
  const float inv = repeats ? 1.0f / a.repetition_penalty : 1.0f;
  const float neg = repeats ? a.repetition_penalty : 1.0f;
  out->reserve(out->size() + h.counts().size());
  for (const TokenHistory::IdCount& c : h.counts()) {
    if (!repeats && c.generated == 0) continue;
    const float add = additive && c.generated > 0
                          ? -(static_cast<float>(c.generated) * a.frequency_penalty + a.presence_penalty)
                          : 0.0f;
    out->push_back({row, c.id, inv, neg, add});
  }
}

// The edit of `id` in the row's sorted segment [first, end of edits), inserted if absent.
LogitEdit& edit_of(std::vector<LogitEdit>* edits, size_t first, uint32_t row, int32_t id) {
  const auto begin = edits->begin() + static_cast<std::ptrdiff_t>(first);
  auto it = std::lower_bound(begin, edits->end(), id, [](const LogitEdit& e, int32_t v) { return e.id < v; });
  if (it == edits->end() || it->id != id) it = edits->insert(it, LogitEdit{row, id, 1.0f, 1.0f, 0.0f});
  return *it;
}

// Many biases or masks: one merge of the three sorted lists instead of an insert each.
constexpr size_t kFoldInPlace = 16;
void merge_extras(const LogitAdjust& adjust, bool masking, uint32_t row, size_t first, std::vector<LogitEdit>* edits) {
  const std::vector<LogitEdit> penalties(edits->begin() + static_cast<std::ptrdiff_t>(first), edits->end());
  edits->resize(first);
  size_t p = 0, b = 0, m = 0;
  const size_t n_masked = masking ? adjust.masked.size() : 0;
  while (p < penalties.size() || b < adjust.bias.size() || m < n_masked) {
    int32_t id = std::numeric_limits<int32_t>::max();
    if (p < penalties.size()) id = std::min(id, penalties[p].id);
    if (b < adjust.bias.size()) id = std::min(id, adjust.bias[b].first);
    if (m < n_masked) id = std::min(id, adjust.masked[m]);
    LogitEdit e{row, id, 1.0f, 1.0f, 0.0f};
    if (p < penalties.size() && penalties[p].id == id) e = penalties[p++];
    if (b < adjust.bias.size() && adjust.bias[b].first == id) e.add += adjust.bias[b++].second;
    if (m < n_masked && adjust.masked[m] == id) {
      e.add = -std::numeric_limits<float>::infinity();
      ++m;
    }
    edits->push_back(e);
  }
}

}  // namespace

// The penalties go straight into `edits` (sorted by id); the biases and masks, few, are folded
// into that segment in place (each a binary search, an insert when the id is new).
void append_adjust_edits(const LogitAdjust& adjust, const TokenHistory* history, uint32_t row, uint32_t next_pos,
                         std::vector<LogitEdit>* edits) {
  const size_t first = edits->size();
  if (adjust.penalizes()) {
    if (history == nullptr || history->counted() != next_pos) {
      throw std::invalid_argument("logit adjust: penalties need the history counted to the row's position");
    }
    penalty_edits(adjust, *history, row, edits);
  }
  const bool masking = adjust.min_tokens > 0 && next_pos < adjust.prompt_len + adjust.min_tokens;
  const size_t extras = adjust.bias.size() + (masking ? adjust.masked.size() : 0);
  if (extras > kFoldInPlace) return merge_extras(adjust, masking, row, first, edits);
  for (const auto& [id, bias] : adjust.bias) edit_of(edits, first, row, id).add += bias;
  if (!masking) return;
  for (const int32_t id : adjust.masked) edit_of(edits, first, row, id).add = -std::numeric_limits<float>::infinity();
}

}  // namespace ds
