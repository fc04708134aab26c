// The GPT-2 byte table (byte-level BPE).
#include <gtest/gtest.h>

#include <set>

#include "coordinator/tokenizer/byte_level.h"

namespace ds::tok {
namespace {

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
