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
  if (m.bits.size() % m.n_words != 0 || m.mask_of_row.size() != m.rows.size()) {
    throw std::invalid_argument("token masks hold " + std::to_string(m.bits.size()) + " words and " +
                                std::to_string(m.mask_of_row.size()) + " indices for " + std::to_string(m.rows.size()) +
                                " rows of " + std::to_string(m.n_words) + " words");
  }
  const size_t distinct = m.n_distinct();
  std::vector<uint8_t> checked(distinct, 0);
  for (size_t i = 0; i < m.rows.size(); ++i) {
    if (m.rows[i] >= n_rows || (i > 0 && m.rows[i] <= m.rows[i - 1])) {
      throw std::invalid_argument("token mask rows must be increasing and inside the logits block");
    }
    if (m.mask_of_row[i] >= distinct) throw std::invalid_argument("a token mask row names a mask that is not there");
    if (checked[m.mask_of_row[i]]) continue;
    checked[m.mask_of_row[i]] = 1;
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
  out.bits = m.bits;
  for (size_t i = 0; i < m.rows.size(); ++i) {
    if (m.rows[i] < first || m.rows[i] >= first + n) continue;
    out.rows.push_back(static_cast<uint32_t>(m.rows[i] - first));
    out.mask_of_row.push_back(m.mask_of_row[i]);
  }
  return out;
}

namespace {

// The allowed ids, counted only up to n_words (past it a bitmask is the shorter form): a dense
// mask stops after a few hundred words, a sparse one skips its zero words.
uint32_t allowed_up_to(const uint32_t* mask, uint32_t n_words) {
  uint32_t pop = 0;
  for (uint32_t w = 0; w < n_words && pop < n_words; ++w) {
    if (mask[w] != 0) pop += static_cast<uint32_t>(__builtin_popcount(mask[w]));
  }
  return pop;
}

// A cheap key for finding equal masks: 64 words spread over the mask (equal keys are confirmed
// word by word, so a collision costs a compare, never a wrong mask).
uint64_t signature(const uint32_t* mask, uint32_t n_words) {
  uint64_t h = 1469598103934665603ull;
  const uint32_t stride = n_words / 64 + 1;
  for (uint32_t w = 0; w < n_words; w += stride) h = (h ^ mask[w]) * 1099511628211ull;
  return h ^ mask[n_words - 1];
}

}  // namespace

void MaskPacker::add(uint32_t row, const uint32_t* mask) {
  const uint64_t sig = signature(mask, n_words_);
  rows.push_back(row);
  for (const Seen& s : seen_) {
    if (s.signature == sig && std::equal(mask, mask + n_words_, s.mask)) {
      mask_of_row.push_back(s.index);
      return;
    }
  }
  const auto index = static_cast<uint32_t>(sizes.size());
  seen_.push_back({sig, index, mask});
  mask_of_row.push_back(index);
  const uint32_t pop = allowed_up_to(mask, n_words_);
  if (pop >= n_words_) {  // a list would be no shorter
    sizes.push_back(n_words_);
    data.insert(data.end(), mask, mask + n_words_);
    return;
  }
  sizes.push_back(pop);
  for (uint32_t w = 0; w < n_words_; ++w) {
    for (uint32_t bitsleft = mask[w]; bitsleft != 0; bitsleft &= bitsleft - 1) {
      data.push_back(w * 32 + static_cast<uint32_t>(__builtin_ctz(bitsleft)));
    }
  }
}

TokenMasks unpack_token_masks(uint32_t n_words, std::vector<uint32_t> rows, std::vector<uint32_t> mask_of_row,
                              const std::vector<uint32_t>& sizes, const uint32_t* data, size_t n_data) {
  TokenMasks m;
  m.n_words = n_words;
  m.rows = std::move(rows);
  m.mask_of_row = std::move(mask_of_row);
  if (m.rows.empty()) return m;
  if (n_words == 0) throw std::invalid_argument("token masks with 0 words per mask");
  m.bits.assign(sizes.size() * size_t{n_words}, 0u);
  size_t at = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    uint32_t* out = m.bits.data() + k * n_words;
    if (sizes[k] > n_words || at + sizes[k] > n_data) throw std::invalid_argument("token mask sizes overrun the data");
    if (sizes[k] == n_words) {
      std::copy_n(data + at, n_words, out);
    } else {
      for (uint32_t j = 0; j < sizes[k]; ++j) {
        const uint32_t id = data[at + j];
        if (id / 32 >= n_words) throw std::invalid_argument("a listed token id is outside the mask");
        out[id / 32] |= 1u << (id % 32);
      }
    }
    at += sizes[k];
  }
  if (at != n_data) throw std::invalid_argument("token mask data longer than its masks");
  return m;
}

}  // namespace ds
