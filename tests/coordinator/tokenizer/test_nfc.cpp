// NFC normalisation (expected strings computed with Python's unicodedata.normalize).
#include <gtest/gtest.h>

#include "coordinator/tokenizer/nfc.h"
#include "tests/coordinator/tokenizer/tokenizer_fixture.h"

namespace ds::tok {
namespace {

std::string nfc(const std::string& s) {
  std::string out;
  return nfc_normalize(s, out) ? out : s;
}

TEST(TokenizerNfc, Normalises) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                                 // e + acute -> é
  EXPECT_EQ(nfc("Vie\xCC\x82\xCC\x81t Nam"), "Vi\xE1\xBA\xBFt Nam");       // two marks -> ế
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                              // singleton Å (Angstrom)
  EXPECT_EQ(nfc("\xE0\xA4\x95\xE0\xA4\xBC"), "\xE0\xA4\x95\xE0\xA4\xBC");  // exclusion: stays
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul jamo -> 각
  EXPECT_EQ(nfc("a\xCC\x82\xCC\xA3"), "\xE1\xBA\xAD");                     // reordered marks -> ậ
  EXPECT_EQ(nfc("\xC3\x85\xCC\x81x"), "\xC7\xBAx");                        // Å + acute -> Ǻ
}

TEST(TokenizerNfc, UnchangedTextIsNotCopied) {
  std::string out = "untouched";
  EXPECT_FALSE(nfc_normalize("plain ASCII, résumé, 東京 🦙", out));
  EXPECT_EQ(out, "untouched");
}

TEST(TokenizerNfc, InvalidBytesPassThrough) {
  EXPECT_EQ(nfc("e\xFF\xCC\x81"), "e\xFF\xCC\x81");  // the invalid byte blocks composition
  EXPECT_EQ(nfc("\xC3"
                "e\xCC\x81"),
            "\xC3\xC3\xA9");
}

TEST(TokenizerNfc, DefaultsPerPreTokenizer) {
  const Tokenizer& qwen2 = test::fixture_tokenizer(PreTokenizerKind::QWEN2);
  const Tokenizer& qwen35 = test::fixture_tokenizer(PreTokenizerKind::QWEN35);
  EXPECT_TRUE(qwen2.nfc());
  EXPECT_FALSE(qwen35.nfc());
  EXPECT_EQ(qwen2.encode("e\xCC\x81", false), (std::vector<int32_t>{963}));
  EXPECT_EQ(qwen35.encode("e\xCC\x81", false), (std::vector<int32_t>{68, 53839}));
}

}  // namespace
}  // namespace ds::tok
