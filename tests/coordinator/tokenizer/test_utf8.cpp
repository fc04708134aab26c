// UTF-8 helpers and the GPT-2 byte table.
#include <gtest/gtest.h>

#include <set>

#include "coordinator/tokenizer/byte_level.h"
#include "coordinator/tokenizer/utf8.h"

namespace ds::tok {
namespace {

std::string sanitize(const std::string& s, bool final, size_t* used = nullptr) {
  std::string out;
  const size_t n = append_sanitized_utf8(s, out, final);
  if (used) *used = n;
  return out;
}

TEST(TokenizerUtf8, Steps) {
  const auto step = [](const std::string& s) {
    return utf8_step(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  EXPECT_EQ(step("A").kind, Utf8Step::VALID);
  EXPECT_EQ(step("\xC3\xA9").cp, 0xE9u);
  EXPECT_EQ(step("\xF0\x9F\xA6\x99").cp, 0x1F999u);
  EXPECT_EQ(step("\xF0\x9F").kind, Utf8Step::INCOMPLETE);
  EXPECT_EQ(step("\xC0\x80").kind, Utf8Step::INVALID);      // overlong
  EXPECT_EQ(step("\xED\xA0\x80").kind, Utf8Step::INVALID);  // surrogate
  EXPECT_EQ(step("\xF4\x90\x80\x80").kind, Utf8Step::INVALID);  // > U+10FFFF
  EXPECT_EQ(step("\xE4\x41").len, 1u);  // maximal subpart: just the lead byte
}

TEST(TokenizerUtf8, SanitizeHoldsBackIncompleteTail) {
  size_t used = 0;
  EXPECT_EQ(sanitize("ab\xE6\x9D", false, &used), "ab");
  EXPECT_EQ(used, 2u);
  EXPECT_EQ(sanitize("ab\xE6\x9D", true, &used), "ab\xEF\xBF\xBD");
  EXPECT_EQ(used, 4u);
  EXPECT_EQ(sanitize("\x80x\xFF", false), "\xEF\xBF\xBDx\xEF\xBF\xBD");
  EXPECT_EQ(utf8_length("é東🦙"), 3u);
}

TEST(TokenizerByteLevel, TableMatchesGpt2) {
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_to_codepoint('!'), static_cast<uint32_t>('!'));
  EXPECT_EQ(byte_to_codepoint(0), 0x100u);
  EXPECT_EQ(byte_to_codepoint(173), 0x143u);  // the last of the 68 remapped bytes
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(codepoint_to_byte(cp), b);
  }
  EXPECT_EQ(codepoint_to_byte(0x144), -1);
  std::string raw;
  for (int b = 0; b < 256; ++b) raw += static_cast<char>(b);
  std::string back;
  EXPECT_TRUE(unmap_bytes(map_bytes(raw), back));
  EXPECT_EQ(back, raw);
  EXPECT_FALSE(unmap_bytes("\xE6\x9D\xB1", back));  // 東 is not a byte image
}

}  // namespace
}  // namespace ds::tok
