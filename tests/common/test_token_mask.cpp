// Grammar masks on logit rows: the host reference, its checks, and slicing by head pass.
#include <gtest/gtest.h>

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
  TokenMasks m{1, {0}, {0xffffffffu}};  // a 32-id mask on a 40-id row
  apply_token_masks(logits.data(), 1, 40, m);
  for (size_t id = 0; id < 40; ++id) EXPECT_EQ(logits[id], id < 32 ? 1.0f : -kInf) << id;
}

TEST(TokenMask, MasksThatDoNotFitTheBlockAreRefused) {
  std::vector<float> logits(2 * 40, 0.0f);
  const auto refused = [&](TokenMasks m) {
    EXPECT_THROW(apply_token_masks(logits.data(), 2, 40, m), std::invalid_argument);
  };
  refused(TokenMasks{2, {2}, {1, 1}});           // row outside the block
  refused(TokenMasks{2, {1, 0}, {1, 1, 1, 1}});  // rows not increasing
  refused(TokenMasks{2, {0}, {1}});              // bits too short
  refused(TokenMasks{0, {0}, {}});               // no words
  refused(TokenMasks{2, {0}, {0, 0}});           // nothing allowed
  refused(TokenMasks{2, {0}, {0, 1u << 9}});     // only id 41 allowed: outside a 40-id row
  EXPECT_NO_THROW(apply_token_masks(logits.data(), 2, 40, TokenMasks{2, {0}, {0, 1u << 7}}));  // id 39
}

TEST(TokenMask, SliceRebasesTheRowsOfAPass) {
  TokenMasks m{1, {1, 3, 4, 9}, {10, 30, 40, 90}};
  const TokenMasks s = slice_token_masks(m, 3, 5);  // rows 3..7
  EXPECT_EQ(s.rows, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(s.bits, (std::vector<uint32_t>{30, 40}));
  EXPECT_TRUE(slice_token_masks(m, 5, 4).empty());
}

}  // namespace
}  // namespace ds
