// Grammar masks of logit rows (structured outputs): for some rows of a block of logits, the set
// of token ids the sampling may pick, as a bitmask. The coordinator's matcher computes them; the
// last stage applies them where the logits are (Backend::mask_logits), after the logit edits and
// before the digest, so every sampling path (device digest, host digest, speculative rule) sees
// the masked rows. A disallowed id's logit becomes -inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ds {

struct TokenMasks {
  uint32_t n_words = 0;        // 32-bit words per mask: bit (id & 31) of word id / 32 set = allowed
  std::vector<uint32_t> rows;  // block rows that are masked, increasing
  std::vector<uint32_t> bits;  // [rows.size() * n_words]
  bool empty() const { return rows.empty(); }
  const uint32_t* mask(size_t i) const { return bits.data() + i * n_words; }
};

// Checks the shape against a block [n_rows, n_vocab]: rows increasing and < n_rows, bits sized
// rows x n_words, n_words > 0, and every mask allows at least one id < n_vocab (a row with
// nothing allowed has no distribution). std::invalid_argument naming the problem otherwise.
void check_token_masks(const TokenMasks& m, size_t n_rows, size_t n_vocab);

// The host reference: logits[row][id] = -inf for each masked row and each id its mask does not
// allow (ids past the mask's n_words * 32 are disallowed). Checks first (check_token_masks).
void apply_token_masks(float* logits, size_t n_rows, size_t n_vocab, const TokenMasks& m);

// The masks of rows [first, first + n), rebased to start at row 0.
TokenMasks slice_token_masks(const TokenMasks& m, size_t first, size_t n);

}  // namespace ds
