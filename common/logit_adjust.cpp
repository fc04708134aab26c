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
  all_.clear();
  generated_.clear();
}

void TokenHistory::add(uint32_t pos, int step) {
  const int32_t id = tokens_[pos];
  const auto bump = [&](std::map<int32_t, uint32_t>& m) {
    if (step > 0) {
      ++m[id];
    } else if (auto it = m.find(id); it != m.end() && --it->second == 0) {
      m.erase(it);
    }
  };
  bump(all_);
  if (pos >= prompt_len_) bump(generated_);
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

// The penalty edits of one row, one per id the history holds, sorted by id: the ids generated
// are a subset of all ids seen, so one walk over both ordered maps folds them.
void penalty_edits(const LogitAdjust& a, const TokenHistory& h, uint32_t row, std::vector<LogitEdit>* out) {
  const bool additive = a.frequency_penalty != 0.0f || a.presence_penalty != 0.0f;
  const auto add_of = [&](uint32_t count) {
    return -(static_cast<float>(count) * a.frequency_penalty + a.presence_penalty);
  };
  const auto& gen = h.generated_counts();
  if (a.repetition_penalty == 1.0f) {
    if (additive) {
      for (const auto& [id, count] : gen) out->push_back({row, id, 1.0f, 1.0f, add_of(count)});
    }
    return;
  }
  // Division by the penalty as one multiply by its inverse: within 1 ulp of llama.cpp's
  // `l / penalty`, and the same bits on every backend.
  const float inv = 1.0f / a.repetition_penalty;
  auto g = gen.begin();
  for (const auto& entry : h.all_counts()) {
    LogitEdit e{row, entry.first, inv, a.repetition_penalty, 0.0f};
    if (g != gen.end() && g->first == entry.first) {
      if (additive) e.add = add_of(g->second);
      ++g;
    }
    out->push_back(e);
  }
}

}  // namespace

void append_adjust_edits(const LogitAdjust& adjust, const TokenHistory* history, uint32_t row, uint32_t next_pos,
                         std::vector<LogitEdit>* edits) {
  std::vector<LogitEdit> penalties;
  if (adjust.penalizes()) {
    if (history == nullptr || history->counted() != next_pos) {
      throw std::invalid_argument("logit adjust: penalties need the history counted to the row's position");
    }
    penalty_edits(adjust, *history, row, &penalties);
  }
  const bool masking = adjust.min_tokens > 0 && next_pos < adjust.prompt_len + adjust.min_tokens;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  // Three lists sorted by id (penalties, biases, masks): merge them into one edit per id.
  size_t p = 0, b = 0, m = 0;
  const auto next_id = [&] {
    int32_t id = std::numeric_limits<int32_t>::max();
    if (p < penalties.size()) id = std::min(id, penalties[p].id);
    if (b < adjust.bias.size()) id = std::min(id, adjust.bias[b].first);
    if (masking && m < adjust.masked.size()) id = std::min(id, adjust.masked[m]);
    return id;
  };
  while (p < penalties.size() || b < adjust.bias.size() || (masking && m < adjust.masked.size())) {
    const int32_t id = next_id();
    LogitEdit e{row, id, 1.0f, 1.0f, 0.0f};
    if (p < penalties.size() && penalties[p].id == id) e = penalties[p++];
    if (b < adjust.bias.size() && adjust.bias[b].first == id) e.add += adjust.bias[b++].second;
    if (masking && m < adjust.masked.size() && adjust.masked[m] == id) {
      e.add = kMasked;
      ++m;
    }
    edits->push_back(e);
  }
}

}  // namespace ds
