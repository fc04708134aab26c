// Decoding, streaming decoding and id validation.
#include <gtest/gtest.h>

#include <stdexcept>

#include "common/utf8.h"
#include "coordinator/tokenizer/byte_level.h"
#include "coordinator/tokenizer/incremental_decoder.h"
#include "tests/coordinator/tokenizer/tokenizer_fixture.h"

namespace ds::test {
namespace {

int32_t byte_token(const Tokenizer& tok, uint8_t b) {
  const auto id = tok.find_token(tok::map_bytes(std::string(1, static_cast<char>(b))));
  EXPECT_TRUE(id.has_value());
  return id.value_or(0);
}

TEST(TokenizerDecode, RendersControlOnlyWhenAsked) {
  const Tokenizer& tok = fixture_tokenizer();
  const std::vector<int32_t> ids = tok.encode("<|im_start|>user\n<think>x</think><|im_end|>", true);
  EXPECT_EQ(tok.decode(ids, true), "<|im_start|>user\n<think>x</think><|im_end|>");
  EXPECT_EQ(tok.decode(ids, false), "user\n<think>x</think>");  // USER_DEFINED always shown
  EXPECT_EQ(tok.token_text(1879), "Ġworld");
  EXPECT_EQ(tok.token_piece(1879, false), " world");
}

TEST(TokenizerDecode, BadIdsThrow) {
  const Tokenizer& tok = fixture_tokenizer();
  EXPECT_THROW(tok.decode({9707, -1}, false), std::out_of_range);
  EXPECT_THROW(tok.decode({tok.n_vocab()}, true), std::out_of_range);
  EXPECT_THROW(tok.token_text(tok.n_vocab()), std::out_of_range);
  EXPECT_THROW(tok.token_text(-7), std::out_of_range);
  EXPECT_THROW(tok.token_type(1 << 30), std::out_of_range);
  IncrementalDecoder dec(tok);
  EXPECT_THROW(dec.feed(-1), std::out_of_range);
  EXPECT_EQ(dec.pending_bytes(), 0u);
}

TEST(TokenizerDecode, IncrementalNeverEmitsPartialUtf8) {
  const Tokenizer& tok = fixture_tokenizer();
  const std::string text =
      "東京 🦙.cpp 서울의 날씨는? 😶‍🌫️ (emoji) ✅ 我想在apple工作1314151天～ 🦙🦙";
  const std::vector<int32_t> ids = tok.encode(text, false);
  IncrementalDecoder dec(tok);
  std::string streamed;
  size_t held_back = 0;  // tokens that completed no character
  for (int32_t id : ids) {
    const std::string chunk = dec.feed(id);
    EXPECT_TRUE(utf8::is_valid(chunk)) << "token " << id;
    EXPECT_LT(dec.pending_bytes(), 4u);
    held_back += chunk.empty();
    streamed += chunk;
  }
  EXPECT_GT(held_back, 0u);  // the llama emoji alone is split over three byte tokens
  streamed += dec.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(tok.decode(ids, false), text);
}

TEST(TokenizerDecode, IncrementalFlushReplacesIncompleteTail) {
  const Tokenizer& tok = fixture_tokenizer();
  IncrementalDecoder dec(tok);
  EXPECT_EQ(dec.feed(9707), "Hello");
  EXPECT_EQ(dec.feed(byte_token(tok, 0xF0)), "");  // lead byte of a 4-byte sequence
  EXPECT_EQ(dec.feed(byte_token(tok, 0x9F)), "");
  EXPECT_EQ(dec.pending_bytes(), 2u);
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.pending_bytes(), 0u);
  EXPECT_EQ(dec.flush(), "");
}

TEST(TokenizerDecode, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer& tok = fixture_tokenizer();
  IncrementalDecoder dec(tok);
  // 0xFF never starts a sequence; an interrupted sequence is replaced as soon as it breaks.
  EXPECT_EQ(dec.feed(byte_token(tok, 0xFF)), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.feed(byte_token(tok, 0xE4)), "");
  EXPECT_EQ(dec.feed(9707), "\xEF\xBF\xBDHello");
  EXPECT_EQ(tok.decode({byte_token(tok, 0xC3)}, false), "\xEF\xBF\xBD");
}

TEST(TokenizerDecode, ControlTokensInStream) {
  const Tokenizer& tok = fixture_tokenizer();
  IncrementalDecoder hidden(tok, false);
  IncrementalDecoder shown(tok, true);
  EXPECT_EQ(hidden.feed(151645), "");
  EXPECT_EQ(shown.feed(151645), "<|im_end|>");
}

}  // namespace
}  // namespace ds::test
