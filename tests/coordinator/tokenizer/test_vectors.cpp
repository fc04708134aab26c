// Reference ids: llama.cpp's vocab test vectors and hand-checked chat-style cases.
#include <gtest/gtest.h>

#include "coordinator/tokenizer/nfc.h"
#include "tests/coordinator/tokenizer/tokenizer_fixture.h"
#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

std::string printable(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

void expect_vectors(const std::string& name, PreTokenizerKind kind, size_t expected_cases) {
  const Tokenizer& tok = fixture_tokenizer(kind);
  const std::vector<TokenizerCase> cases = read_vocab_vectors(name);
  ASSERT_EQ(cases.size(), expected_cases);
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": '" + printable(cases[i].text) + "'");
    const std::vector<int32_t> ids = tok.encode(cases[i].text, false);
    EXPECT_EQ(ids, cases[i].ids);
    EXPECT_EQ(tok.decode(ids, true), cases[i].text);
    passed += ids == cases[i].ids;
  }
  EXPECT_EQ(passed, expected_cases);
}

TEST(TokenizerVectors, Qwen2) {
  expect_vectors("qwen2", PreTokenizerKind::QWEN2, 46);
}

TEST(TokenizerVectors, Qwen35OnFixtureVocab) {
  expect_vectors("qwen35", PreTokenizerKind::QWEN35, 50);
}

TEST(TokenizerVectors, FixtureDeclaresQwen2) {
  const Tokenizer tok = Tokenizer::from_file(tiny_model_path());
  EXPECT_EQ(tok.pre_tokenizer(), PreTokenizerKind::QWEN2);
  EXPECT_EQ(tok.encode("Hello world", false), (std::vector<int32_t>{9707, 1879}));
}

TEST(TokenizerVectors, JsonCases) {
  const Tokenizer& tok = fixture_tokenizer();
  const std::vector<TokenizerCase> cases = read_json_cases();
  ASSERT_EQ(cases.size(), 11u);
  for (const TokenizerCase& c : cases) {
    SCOPED_TRACE("'" + printable(c.text) + "'");
    const std::vector<int32_t> ids = tok.encode(c.text, true);
    EXPECT_EQ(ids, c.ids);
    // The qwen2 tokenizer NFC-normalises, so "e\u0301" decodes as the precomposed "é".
    std::string normalized;
    EXPECT_EQ(tok.decode(ids, true), tok::nfc_normalize(c.text, normalized) ? normalized : c.text);
  }
}

// The memoised piece cache must not change results: encode twice, and with it disabled.
TEST(TokenizerVectors, CacheDoesNotChangeIds) {
  TokenizerOptions no_cache;
  no_cache.cache_capacity = 0;
  const Tokenizer uncached = Tokenizer::from_file(tiny_model_path(), no_cache);
  const Tokenizer& cached = fixture_tokenizer();
  for (const TokenizerCase& c : read_vocab_vectors("qwen2")) {
    const std::vector<int32_t> first = cached.encode(c.text, false);
    EXPECT_EQ(cached.encode(c.text, false), first);
    EXPECT_EQ(uncached.encode(c.text, false), first);
  }
}

// Concatenating all cases exercises long inputs (many pieces, pieces across case borders).
TEST(TokenizerVectors, LongTextRoundTrip) {
  const Tokenizer& tok = fixture_tokenizer(PreTokenizerKind::QWEN35);
  std::string all;
  for (const TokenizerCase& c : read_vocab_vectors("qwen35")) all += c.text + "\n";
  std::string big;
  while (big.size() < 200000) big += all;
  EXPECT_EQ(tok.decode(tok.encode(big, false), true), big);
}

}  // namespace
}  // namespace ds::test
