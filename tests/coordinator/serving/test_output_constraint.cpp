// The engine's per-request constraint: masks of a row and its drafts, the matcher left as it
// was, refused drafts, the reasoning block before the grammar, and completion.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "coordinator/engine/engine.h"
#include "coordinator/serving/output_constraint.h"
#include "coordinator/structured/grammar.h"
#include "coordinator/structured/token_trie.h"

namespace ds {
namespace {

// Ids 0..255: single bytes; 256 "yes"; 257 "</think>" (no bytes: a control token); 258 EOS.
constexpr int32_t kYes = 256, kThink = 257, kEos = 258;

OutputConstraint yes_no(int32_t starts_after = -1) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.emplace_back("yes");
  bytes.emplace_back("");
  bytes.emplace_back("");
  OutputConstraint c;
  c.vocab = std::make_shared<const structured::TokenVocab>(std::move(bytes), std::vector<int32_t>{kEos});
  c.grammar = structured::compile_choice({"yes", "no"});
  c.starts_after = starts_after;
  return c;
}

bool allowed(const SeqRequest& r, size_t mask, int32_t id) {
  return (r.mask_bits[mask * r.mask_words + static_cast<size_t>(id) / 32] >> (id % 32)) & 1u;
}

// A decode row: `last` then the drafts, logits for the last n_drafts + 1 rows.
SeqRequest row(std::vector<int32_t> tokens, uint32_t n_drafts) {
  SeqRequest r;
  r.tokens = std::move(tokens);
  for (uint32_t j = 0; j <= n_drafts; ++j)
    r.logit_rows.push_back(static_cast<uint32_t>(r.tokens.size() - 1 - n_drafts + j));
  return r;
}

TEST(OutputConstraint, OneRowIsMaskedByTheGrammarsStart) {
  OutputConstraintState st(yes_no());
  SeqRequest r = row({'x'}, 0);
  st.fill_masks(0, &r);
  ASSERT_EQ(r.mask_rows, (std::vector<uint32_t>{0}));
  EXPECT_EQ(r.mask_words, 9u);  // 259 ids
  EXPECT_TRUE(allowed(r, 0, 'y'));
  EXPECT_TRUE(allowed(r, 0, 'n'));
  EXPECT_TRUE(allowed(r, 0, kYes));
  EXPECT_FALSE(allowed(r, 0, 'a'));
  EXPECT_FALSE(allowed(r, 0, kEos));
  EXPECT_FALSE(st.accept('a'));
  EXPECT_TRUE(st.accept('n'));
  EXPECT_FALSE(st.complete());
  EXPECT_TRUE(st.accept('o'));
  EXPECT_TRUE(st.complete());
}

TEST(OutputConstraint, DraftRowsSeeTheDraftsBeforeThemAndTheMatcherIsRestored) {
  OutputConstraintState st(yes_no());
  SeqRequest r = row({'x', 'y', 'e'}, 2);
  st.fill_masks(2, &r);
  ASSERT_EQ(r.mask_rows, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_TRUE(allowed(r, 0, 'y'));
  EXPECT_TRUE(allowed(r, 1, 'e'));
  EXPECT_FALSE(allowed(r, 1, 'y'));
  EXPECT_TRUE(allowed(r, 2, 's'));
  EXPECT_FALSE(allowed(r, 2, 'e'));
  // Restored: the same call gives the same masks, and the start still takes 'n'.
  SeqRequest again = row({'x', 'y', 'e'}, 2);
  st.fill_masks(2, &again);
  EXPECT_EQ(again.mask_bits, r.mask_bits);
  EXPECT_TRUE(st.accept('n'));
}

TEST(OutputConstraint, RowsAfterARefusedDraftRepeatTheLastRealMask) {
  OutputConstraintState st(yes_no());
  SeqRequest r = row({'x', 'q', 'y'}, 2);
  st.fill_masks(2, &r);
  ASSERT_EQ(r.mask_rows.size(), 3u);
  EXPECT_FALSE(allowed(r, 0, 'q'));  // the draft is rejected at row 0, so rows 1-2 never emit
  for (size_t w = 0; w < r.mask_words; ++w) {
    EXPECT_EQ(r.mask_bits[r.mask_words + w], r.mask_bits[w]);
    EXPECT_EQ(r.mask_bits[2 * r.mask_words + w], r.mask_bits[w]);
  }
  EXPECT_TRUE(st.accept('y'));  // nothing was consumed
}

TEST(OutputConstraint, TheGrammarStartsAfterTheReasoningBlock) {
  OutputConstraintState st(yes_no(kThink));
  SeqRequest r = row({'x', kThink, 'y'}, 2);
  st.fill_masks(2, &r);
  EXPECT_EQ(r.mask_rows, (std::vector<uint32_t>{1, 2}));  // row 0 picks a reasoning token: free
  EXPECT_TRUE(allowed(r, 0, 'y'));
  EXPECT_TRUE(allowed(r, 1, 'e'));
  EXPECT_TRUE(st.accept('a'));  // reasoning: anything
  EXPECT_TRUE(st.accept(kThink));
  EXPECT_FALSE(st.accept('a'));
  EXPECT_TRUE(st.accept(kYes));
  EXPECT_TRUE(st.complete());
  SeqRequest end = row({kYes}, 0);
  st.fill_masks(0, &end);
  ASSERT_EQ(end.mask_rows.size(), 1u);
  for (int32_t id = 0; id < kEos; ++id) EXPECT_FALSE(allowed(end, 0, id)) << id;
  EXPECT_TRUE(allowed(end, 0, kEos));
}

}  // namespace
}  // namespace ds
