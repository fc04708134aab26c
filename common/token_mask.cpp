#include "common/token_mask.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace ds {

namespace {

bool allows_some(const uint32_t* mask, size_t n_words, size_t n_vocab) {
  const size_t full = std::min(n_words, n_vocab / 32);
  for (size_t w = 0; w < full; ++w) {
    if (mask[w] != 0) return true;
  }
  if (full < n_words && n_vocab % 32 != 0) {  // the word holding the last ids
    return (mask[full] & ((uint32_t{1} << (n_vocab % 32)) - 1)) != 0;
  }
  return false;
}

}  // namespace

void check_token_masks(const TokenMasks& m, size_t n_rows, size_t n_vocab) {
  if (m.rows.empty()) return;
  if (m.n_words == 0) throw std::invalid_argument("token masks with 0 words per mask");
  if (m.bits.size() != m.rows.size() * m.n_words) {
    throw std::invalid_argument("token masks hold " + std::to_string(m.bits.size()) + " words for " +
                                std::to_string(m.rows.size()) + " rows of " + std::to_string(m.n_words));
  }
  for (size_t i = 0; i < m.rows.size(); ++i) {
    if (m.rows[i] >= n_rows || (i > 0 && m.rows[i] <= m.rows[i - 1])) {
      throw std::invalid_argument("token mask rows must be increasing and inside the logits block");
    }
    if (!allows_some(m.mask(i), m.n_words, n_vocab)) {
      throw std::invalid_argument("a token mask allows no token of the vocabulary");
    }
  }
}

void apply_token_masks(float* logits, size_t n_rows, size_t n_vocab, const TokenMasks& m) {
  check_token_masks(m, n_rows, n_vocab);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < m.rows.size(); ++i) {
    float* row = logits + m.rows[i] * n_vocab;
    const uint32_t* mask = m.mask(i);
    for (size_t id = 0; id < n_vocab; ++id) {
      const size_t w = id / 32;
      if (w >= m.n_words || ((mask[w] >> (id % 32)) & 1u) == 0) row[id] = kNegInf;
    }
  }
}

TokenMasks slice_token_masks(const TokenMasks& m, size_t first, size_t n) {
  TokenMasks out;
  out.n_words = m.n_words;
  for (size_t i = 0; i < m.rows.size(); ++i) {
    if (m.rows[i] < first || m.rows[i] >= first + n) continue;
    out.rows.push_back(static_cast<uint32_t>(m.rows[i] - first));
    out.bits.insert(out.bits.end(), m.mask(i), m.mask(i) + m.n_words);
  }
  return out;
}

}  // namespace ds
