// Grammar masks on logit rows: the host reference, its checks, and slicing by head pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "common/token_mask.h"

namespace ds {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(TokenMask, DisallowedIdsBecomeMinusInfinityAndOtherRowsStay) {
  const size_t rows = 3, vocab = 70;  // 3 words; ids 64..69 in the last, partial word
  std::vector<float> logits(rows * vocab);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i);
  TokenMasks m;
  m.n_words = 3;
  m.rows = {0, 2};
  m.mask_of_row = {0, 1};
  m.bits = {0b101u, 0u,       0u,        // row 0: ids 0 and 2
            0u,     1u << 31, 1u << 5};  // row 2: ids 63 and 69
  apply_token_masks(logits.data(), rows, vocab, m);
  for (size_t id = 0; id < vocab; ++id) {
    EXPECT_EQ(logits[id], id == 0 || id == 2 ? static_cast<float>(id) : -kInf) << id;
    EXPECT_EQ(logits[vocab + id], static_cast<float>(vocab + id)) << "unmasked row, id " << id;
    const bool allowed = id == 63 || id == 69;
    EXPECT_EQ(logits[2 * vocab + id], allowed ? static_cast<float>(2 * vocab + id) : -kInf) << id;
  }
}

TEST(TokenMask, IdsPastTheMaskWordsAreDisallowed) {
  std::vector<float> logits(40, 1.0f);
  TokenMasks m{1, {0}, {0}, {0xffffffffu}};  // a 32-id mask on a 40-id row
  apply_token_masks(logits.data(), 1, 40, m);
  for (size_t id = 0; id < 40; ++id) EXPECT_EQ(logits[id], id < 32 ? 1.0f : -kInf) << id;
}

TEST(TokenMask, MasksThatDoNotFitTheBlockAreRefused) {
  std::vector<float> logits(2 * 40, 0.0f);
  const auto refused = [&](TokenMasks m) {
    EXPECT_THROW(apply_token_masks(logits.data(), 2, 40, m), std::invalid_argument);
  };
  refused(TokenMasks{2, {2}, {0}, {1, 1}});        // row outside the block
  refused(TokenMasks{2, {1, 0}, {0, 0}, {1, 1}});  // rows not increasing
  refused(TokenMasks{2, {0}, {0}, {1}});           // bits not a whole mask
  refused(TokenMasks{2, {0}, {1}, {1, 1}});        // names a second mask that is not there
  refused(TokenMasks{2, {0, 1}, {0}, {1, 1}});     // one index for two rows
  refused(TokenMasks{0, {0}, {0}, {}});            // no words
  refused(TokenMasks{2, {0}, {0}, {0, 0}});        // nothing allowed
  refused(TokenMasks{2, {0}, {0}, {0, 1u << 9}});  // only id 41 allowed: outside a 40-id row
  EXPECT_NO_THROW(apply_token_masks(logits.data(), 2, 40, TokenMasks{2, {0}, {0}, {0, 1u << 7}}));  // id 39
}

TEST(TokenMask, SliceRebasesTheRowsOfAPass) {
  TokenMasks m{1, {1, 3, 4, 9}, {0, 1, 0, 1}, {10, 30}};
  const TokenMasks s = slice_token_masks(m, 3, 5);  // rows 3..7
  EXPECT_EQ(s.rows, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(s.mask_of_row, (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(s.mask(0)[0], 30u);
  EXPECT_EQ(s.mask(1)[0], 10u);
  EXPECT_TRUE(slice_token_masks(m, 5, 4).empty());
}

// The wire form: equal masks travel once, sparse ones as id lists, dense ones as bitmasks, and
// unpacking gives every row its own mask back.
TEST(TokenMask, PackingSharesEqualMasksAndListsSparseOnes) {
  const uint32_t words = 8;  // 256 ids
  std::vector<uint32_t> sparse(words, 0), dense(words, 0xfffffff0u), other(words, 0);
  sparse[3] = 0b1001u;  // ids 96 and 99
  other[7] = 1u << 31;  // id 255
  MaskPacker p(words);
  p.add(0, sparse.data());
  p.add(2, dense.data());
  p.add(3, sparse.data());
  p.add(5, other.data());
  p.add(6, dense.data());
  EXPECT_EQ(p.mask_of_row, (std::vector<uint32_t>{0, 1, 0, 2, 1}));
  EXPECT_EQ(p.sizes, (std::vector<uint32_t>{2, words, 1}));
  EXPECT_EQ(p.data.size(), 2u + words + 1u);
  const TokenMasks m = unpack_token_masks(words, p.rows, p.mask_of_row, p.sizes, p.data.data(), p.data.size());
  const std::vector<const std::vector<uint32_t>*> want{&sparse, &dense, &sparse, &other, &dense};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(std::equal(want[i]->begin(), want[i]->end(), m.mask(i))) << "row " << i;
  }
  EXPECT_THROW(unpack_token_masks(words, p.rows, p.mask_of_row, p.sizes, p.data.data(), p.data.size() - 1),
               std::invalid_argument);
  const std::vector<uint32_t> bad_id{2, 256};  // 256 is past 8 words
  EXPECT_THROW(unpack_token_masks(words, {0}, {0}, {2}, bad_id.data(), bad_id.size()), std::invalid_argument);
}

}  // namespace
}  // namespace ds
