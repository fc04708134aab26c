// Pre-tokenizer pieces, hostile inputs (long runs, invalid UTF-8) and concurrent use.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "coordinator/tokenizer/pretokenizer.h"
#include "tests/coordinator/tokenizer/tokenizer_fixture.h"

namespace ds::test {
namespace {

std::vector<std::string> pieces(PreTokenizerKind kind, const std::string& text) {
  const tok::PreTokenizer pre(kind);
  std::vector<tok::Span> spans;
  pre.split(text, spans);
  std::vector<std::string> out;
  size_t expect_begin = 0;
  for (const tok::Span& s : spans) {
    EXPECT_EQ(s.begin, expect_begin);  // contiguous cover
    EXPECT_LT(s.begin, s.end);
    out.push_back(text.substr(s.begin, s.end - s.begin));
    expect_begin = s.end;
  }
  EXPECT_EQ(expect_begin, text.size());
  return out;
}

using Pieces = std::vector<std::string>;

TEST(TokenizerPreTokenizer, Qwen2Pieces) {
  const auto k = PreTokenizerKind::QWEN2;
  EXPECT_EQ(pieces(k, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces(k, "x=123"), (Pieces{"x", "=", "1", "2", "3"}));
  EXPECT_EQ(pieces(k, "I'M here  \n\n ok"), (Pieces{"I", "'M", " here", "  \n\n", " ok"}));
  EXPECT_EQ(pieces(k, "e\xCC\x81"), (Pieces{"e", "\xCC\x81"}));  // mark is punctuation-like
  EXPECT_TRUE(tok::PreTokenizer(k).jit());
}

TEST(TokenizerPreTokenizer, Qwen35KeepsCombiningMarksInWords) {
  EXPECT_EQ(pieces(PreTokenizerKind::QWEN35, "e\xCC\x81 vie\xCC\x82\xCC\x81t"),
            (Pieces{"e\xCC\x81", " vie\xCC\x82\xCC\x81t"}));
}

TEST(TokenizerPreTokenizer, NamesRoundTrip) {
  EXPECT_EQ(pre_tokenizer_from_name("qwen35"), PreTokenizerKind::QWEN35);
  EXPECT_EQ(pre_tokenizer_from_name("qwen2"), PreTokenizerKind::QWEN2);
  EXPECT_EQ(pre_tokenizer_from_name("gpt2"), std::nullopt);
  EXPECT_STREQ(pre_tokenizer_name(PreTokenizerKind::QWEN35), "qwen35");
}

TEST(TokenizerPreTokenizer, InvalidUtf8IsCoveredAndKeptAsBytes) {
  const std::string text = "ab\xFF cd\xC3 \xE6\x9D\xB1\xE6\x9D x\x80y";
  pieces(PreTokenizerKind::QWEN35, text);  // checks the cover
  const Tokenizer& tok = fixture_tokenizer(PreTokenizerKind::QWEN35);
  std::string bytes;
  for (int32_t id : tok.encode(text, false)) bytes += tok.token_piece(id, true);
  EXPECT_EQ(bytes, text);
}

// Long runs must stay linear-ish and must not overflow the PCRE2 JIT stack.
TEST(TokenizerPreTokenizer, LongRunsRoundTrip) {
  const Tokenizer& tok = fixture_tokenizer(PreTokenizerKind::QWEN35);
  const std::vector<std::string> inputs = {
      std::string(200000, ' '),  std::string(200000, 'a'), std::string(100000, '7'),
      std::string(100000, '\n'), std::string(100000, '!'),
  };
  std::string mixed_ws;
  for (int i = 0; i < 30000; ++i) mixed_ws += i % 3 ? " \t" : " \r\n";
  std::string marks;
  for (int i = 0; i < 30000; ++i) marks += "a\xCC\x81";
  for (const std::string& in : {inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], mixed_ws, marks}) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok.encode(in, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0);
    EXPECT_EQ(tok.decode(ids, true), in);
  }
}

TEST(TokenizerPreTokenizer, ConcurrentEncodeIsConsistent) {
  const Tokenizer& tok = fixture_tokenizer(PreTokenizerKind::QWEN35);
  std::string text;
  for (const TokenizerCase& c : read_vocab_vectors("qwen35")) text += c.text;
  const std::vector<int32_t> expected = tok.encode(text, true);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (size_t t = 0; t < ok.size(); ++t) {
    threads.emplace_back([&, t] {
      int good = 0;
      for (int i = 0; i < 50; ++i) good += tok.encode(text, true) == expected;
      ok[t] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int good : ok) EXPECT_EQ(good, 50);
}

}  // namespace
}  // namespace ds::test
