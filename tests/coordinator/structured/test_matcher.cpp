// Matcher mechanics: rollback, partial UTF-8 across tokens, the whitespace bound, EOS rules,
// forced bytes, mask against a byte vocabulary, regex and choice grammars.
#include <gtest/gtest.h>

#include "tests/coordinator/structured/structured_test_util.h"

namespace ds::structured::test {
namespace {

int32_t tok(const std::string& s) {
  auto v = byte_vocab();
  for (int32_t i = 0; i < v->n_vocab(); ++i)
    if (v->token_bytes(i) == s) return i;
  ADD_FAILURE() << "no token " << s;
  return -1;
}

TEST(Matcher, RollbackRestoresState) {
  auto g = schema(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
  Matcher m(g, byte_vocab());
  for (int32_t t : {tok("{\""), tok("a"), tok("\":"), tok("12")}) ASSERT_TRUE(m.accept_token(t));
  std::vector<uint32_t> before(byte_vocab()->n_words()), after(byte_vocab()->n_words());
  m.fill_mask(before.data());
  ASSERT_TRUE(m.accept_token(tok("}")));
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.terminated());
  m.rollback(1);
  EXPECT_FALSE(m.accepting());
  m.fill_mask(after.data());
  EXPECT_EQ(before, after);
  m.rollback(2);                       // back to `{"a`: inside the key string
  EXPECT_FALSE(m.accept_token(0x01));  // a raw control byte never fits a string
  EXPECT_TRUE(m.accept_token(tok("\":")));
  EXPECT_TRUE(m.accept_token(tok("7")));
  EXPECT_TRUE(m.accept_token(tok("}")));
  EXPECT_TRUE(m.accept_token(byte_vocab_eos()));
  EXPECT_FALSE(m.accept_token(tok(" ")));
  m.rollback(100);
  EXPECT_EQ(m.n_accepted(), 0u);
  EXPECT_TRUE(m.accept_token(tok("{\"")));
}

TEST(Matcher, PartialUtf8AcrossTokens) {
  auto g = schema(R"({"type":"string","maxLength":1})");
  Matcher m(g, byte_vocab());
  ASSERT_TRUE(m.accept_token(tok("\"")));
  ASSERT_TRUE(m.accept_token(tok("\xC3")));  // first byte of é
  std::vector<uint32_t> mask(byte_vocab()->n_words());
  m.fill_mask(mask.data());
  EXPECT_TRUE(bit(mask, tok("\xA9\"")));  // continuation byte + closing quote
  EXPECT_FALSE(bit(mask, tok("\"")));     // a quote cannot cut a character
  EXPECT_FALSE(bit(mask, tok("a")));
  for (int b = 0x80; b <= 0xBF; ++b) EXPECT_TRUE(bit(mask, b));
  EXPECT_FALSE(m.accept_token(tok("\"")));
  ASSERT_TRUE(m.accept_token(tok("\xA9\"")));
  EXPECT_TRUE(m.accepting());
  // Invalid UTF-8 is never allowed.
  Matcher m2(g, byte_vocab());
  ASSERT_TRUE(m2.accept_token(tok("\"")));
  EXPECT_FALSE(m2.accept_token(0xFF));
  EXPECT_FALSE(m2.accept_token(0x80));
  EXPECT_FALSE(m2.accept_token(0xC0));  // overlong lead byte
}

TEST(Matcher, WhitespaceRunsAreBounded) {
  auto g = compile_json_object();
  EXPECT_TRUE(accepts_bytes(g, "{" + std::string(8, ' ') + "}"));
  EXPECT_FALSE(accepts_bytes(g, "{" + std::string(9, ' ') + "}"));
  EXPECT_TRUE(accepts_bytes(g, "{\"a\"" + std::string(8, '\n') + ":" + std::string(8, '\t') + "1}"));
  EXPECT_FALSE(accepts_bytes(g, " {}"));  // nothing before the value
  EXPECT_FALSE(accepts_bytes(g, "{} "));  // nor after it
  EXPECT_FALSE(accepts_bytes(g, "[]"));
  GrammarOptions compact;
  compact.max_ws = 0;
  auto c = compile_json_object(compact);
  EXPECT_TRUE(accepts_bytes(c, "{\"a\":[1,2]}"));
  EXPECT_FALSE(accepts_bytes(c, "{\"a\": 1}"));
  // After 8 whitespace bytes the mask allows no more whitespace.
  Matcher m(g, byte_vocab());
  ASSERT_TRUE(m.accept_token(tok("{")));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(m.accept_token(tok(" ")));
  std::vector<uint32_t> mask(byte_vocab()->n_words());
  m.fill_mask(mask.data());
  EXPECT_FALSE(bit(mask, tok(" ")));
  EXPECT_FALSE(bit(mask, tok("\n")));
  EXPECT_TRUE(bit(mask, tok("}")));
  EXPECT_TRUE(bit(mask, tok("\"")));
}

TEST(Matcher, EosOnlyWhenAccepting) {
  auto g = schema(R"({"type":"integer"})");
  Matcher m(g, byte_vocab());
  std::vector<uint32_t> mask(byte_vocab()->n_words());
  m.fill_mask(mask.data());
  EXPECT_FALSE(bit(mask, byte_vocab_eos()));
  EXPECT_FALSE(m.accept_token(byte_vocab_eos()));
  ASSERT_TRUE(m.accept_token(tok("12")));
  m.fill_mask(mask.data());
  EXPECT_TRUE(bit(mask, byte_vocab_eos()));
  EXPECT_TRUE(bit(mask, tok("3")));
  EXPECT_FALSE(m.terminated());
  ASSERT_TRUE(m.accept_token(byte_vocab_eos()));
  EXPECT_TRUE(m.terminated());
  m.fill_mask(mask.data());
  for (uint32_t w : mask) EXPECT_EQ(w, 0u);
}

TEST(Matcher, MaskMatchesAcceptForEveryToken) {
  auto g = schema(R"({"type":"object","properties":{"name":{"type":"string"},"n":{"enum":[1,22]}},
                      "required":["n"],"additionalProperties":false})");
  Matcher m(g, byte_vocab());
  std::vector<uint32_t> mask(byte_vocab()->n_words());
  for (const std::string step : {"{\"", "n", "\":", "2"}) {
    m.fill_mask(mask.data());
    for (int32_t id = 0; id < byte_vocab()->n_vocab(); ++id) {
      Matcher probe = m;
      EXPECT_EQ(bit(mask, id), probe.accept_token(id)) << "token " << id << " after " << step;
    }
    ASSERT_TRUE(m.accept_token(tok(step)));
  }
}

TEST(Matcher, ForcedBytes) {
  auto g = schema(R"({"type":"object","properties":{"status":{"const":"ok"}},"required":["status"],
                      "additionalProperties":false})");
  Matcher m(g, byte_vocab());
  ASSERT_TRUE(m.accept_token(tok("{")));
  ASSERT_TRUE(m.accept_token(tok("\"")));
  auto f = m.forced_bytes();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(*f, "status\"");
}

TEST(Grammars, RegexAndChoice) {
  auto r = compile_regex("[a-c]{2}x?|\\d+");
  EXPECT_TRUE(accepts_bytes(r, "ab"));
  EXPECT_TRUE(accepts_bytes(r, "abx"));
  EXPECT_TRUE(accepts_bytes(r, "123"));
  EXPECT_FALSE(accepts_bytes(r, "a"));
  EXPECT_FALSE(accepts_bytes(r, "abxx"));
  auto c = compile_choice({"yes", "no", "maybe"});
  EXPECT_TRUE(accepts_bytes(c, "no"));
  EXPECT_FALSE(accepts_bytes(c, "n"));
  EXPECT_TRUE(accepts_qwen(c, "maybe"));
  EXPECT_THROW(compile_regex("(?<=a)b"), SchemaError);
}

TEST(Vocab, QwenTokenizer) {
  auto v = qwen_vocab();
  EXPECT_EQ(v->n_vocab(), qwen_tokenizer().n_vocab());
  EXPECT_FALSE(v->eog_ids().empty());
  auto g = compile_json_object();
  EXPECT_TRUE(accepts_qwen(g, "{\"key\": [1, 2.5, \"x\\u00e9\", {\"n\": null}], \"b\": true}"));
  EXPECT_FALSE(accepts_qwen(g, "{\"key\": [1,]}"));
}

}  // namespace
}  // namespace ds::structured::test
