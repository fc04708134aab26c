// Budgeted encoding: a text over its token budget is refused as soon as that is certain, and a
// text within it encodes exactly as without a budget (the budget never changes ids).
#include <gtest/gtest.h>

#include <string>

#include "tests/coordinator/tokenizer/tokenizer_fixture.h"

namespace ds::test {
namespace {

size_t at_least(const Tokenizer& t, const std::string& text, size_t budget) {
  try {
    t.encode(text, false, budget);
  } catch (const TokenBudgetExceeded& e) {
    return e.at_least();
  }
  return 0;
}

TEST(TokenBudget, WithinTheBudgetIdsAreUnchanged) {
  for (const PreTokenizerKind kind : {PreTokenizerKind::QWEN2, PreTokenizerKind::QWEN35}) {
    const Tokenizer& t = fixture_tokenizer(kind);
    for (const TokenizerCase& c : read_json_cases()) {
      const std::vector<int32_t> free = t.encode(c.text, false);
      EXPECT_EQ(t.encode(c.text, false, free.size()), free) << c.text;
      // One token short: refused, with a bound that is both over the budget and true.
      if (!free.empty()) {
        EXPECT_EQ(at_least(t, c.text, free.size() - 1), free.size()) << c.text;
      }
    }
  }
}

// The fixture vocabulary's longest token has 128 bytes (a run of spaces or dashes).
TEST(TokenBudget, OversizedTextIsRefusedBeforeAnyWork) {
  const Tokenizer& t = fixture_tokenizer(PreTokenizerKind::QWEN35);  // no NFC: the bound is bytes / 128
  ASSERT_EQ(t.max_token_bytes(), 128u);
  const std::string word(size_t{31} << 20, 'a');  // the attack run's prompt: one 31 MiB word
  // The whole-text bound, before pre-tokenizing: exactly ceil(bytes / 128).
  EXPECT_EQ(at_least(t, word, 8191), (word.size() + 127) / 128);
  const Tokenizer& nfc = fixture_tokenizer(PreTokenizerKind::QWEN2);  // NFC may shorten 3x
  ASSERT_TRUE(nfc.nfc());
  EXPECT_EQ(nfc.min_tokens(word.size()), (word.size() + 383) / 384);
}

TEST(TokenBudget, ALongPieceIsRefusedBeforeItsBpe) {
  const Tokenizer& t = fixture_tokenizer(PreTokenizerKind::QWEN35);
  // 100 words, then one word of 64 KiB: within the whole-text bound of a 2000-token budget
  // (66 KiB / 128 = 530), but the long piece's own bound overruns what is left.
  std::string text;
  for (int i = 0; i < 100; ++i) text += " hello";
  const std::vector<int32_t> head = t.encode(text, false);
  text += " " + std::string(64 << 10, 'x');
  EXPECT_EQ(at_least(t, text, 600), head.size() + 1 + (64 << 10) / 128);
}

TEST(TokenBudget, MorePiecesThanTheBudgetIsRefusedWhileSplitting) {
  const Tokenizer& t = fixture_tokenizer(PreTokenizerKind::QWEN35);
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "1";  // every digit is a piece of its own
  // The split stops at the first piece over the budget.
  EXPECT_EQ(at_least(t, text, 100), 101u);
  EXPECT_EQ(t.encode(text, false, 5000).size(), 5000u);
}

TEST(TokenBudget, ControlTokensCount) {
  const Tokenizer& t = fixture_tokenizer(PreTokenizerKind::QWEN35);
  const std::string text = "<|im_start|><|im_end|><|im_start|>";
  EXPECT_EQ(t.encode(text, true, 3).size(), 3u);
  try {
    t.encode(text, true, 2);
    ADD_FAILURE() << "no TokenBudgetExceeded";
  } catch (const TokenBudgetExceeded& e) {
    EXPECT_EQ(e.at_least(), 3u);
  }
}

}  // namespace
}  // namespace ds::test
