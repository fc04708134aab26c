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
  uint32_t n_words = 0;               // 32-bit words per mask: bit (id & 31) of word id / 32 set = allowed
  std::vector<uint32_t> rows;         // block rows that are masked, increasing
  std::vector<uint32_t> mask_of_row;  // [rows.size()] which of the distinct masks each row takes
  std::vector<uint32_t> bits;         // the distinct masks, [n_distinct * n_words]
  bool empty() const { return rows.empty(); }
  size_t n_distinct() const { return n_words == 0 ? 0 : bits.size() / n_words; }
  const uint32_t* mask(size_t i) const { return bits.data() + size_t{mask_of_row[i]} * n_words; }
};

// Checks the shape against a block [n_rows, n_vocab]: rows increasing and < n_rows, one mask
// index per row below n_distinct, bits a whole number of masks, n_words > 0, and every row's mask
// allows at least one id < n_vocab (a row with nothing allowed has no distribution).
// std::invalid_argument naming the problem otherwise.
void check_token_masks(const TokenMasks& m, size_t n_rows, size_t n_vocab);

// The host reference: logits[row][id] = -inf for each masked row and each id its mask does not
// allow (ids past the mask's n_words * 32 are disallowed). Checks first (check_token_masks).
void apply_token_masks(float* logits, size_t n_rows, size_t n_vocab, const TokenMasks& m);

// The masks of rows [first, first + n), rebased to start at row 0 (distinct masks kept).
TokenMasks slice_token_masks(const TokenMasks& m, size_t first, size_t n);

// The wire form of a step's masks (StepPlan.mask_*): every distinct mask once, each as its
// bitmask or, when shorter, the sorted list of the ids it allows (a JSON grammar outside strings
// allows a few dozen tokens: 100s of bytes instead of 31 KiB at a 248K vocabulary). Rows in the
// same grammar state (one schema, many streams) share one entry.
class MaskPacker {
 public:
  explicit MaskPacker(uint32_t n_words) : n_words_(n_words) {}
  void add(uint32_t row, const uint32_t* mask);  // rows increasing
  uint32_t n_words() const { return n_words_; }
  std::vector<uint32_t> rows, mask_of_row;
  std::vector<uint32_t> sizes;  // per distinct mask: n_words (a bitmask) or the number of ids listed
  std::vector<uint32_t> data;   // the distinct masks' words or ids, concatenated

 private:
  uint32_t n_words_;
  struct Seen {
    uint64_t signature;
    uint32_t index;
    const uint32_t* mask;  // the caller's bits (alive until the packer is done)
  };
  std::vector<Seen> seen_;
};

// Reads the wire form back (std::invalid_argument when sizes, ids or indices do not fit).
TokenMasks unpack_token_masks(uint32_t n_words, std::vector<uint32_t> rows, std::vector<uint32_t> mask_of_row,
                              const std::vector<uint32_t>& sizes, const uint32_t* data, size_t n_data);

}  // namespace ds
