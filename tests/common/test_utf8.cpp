// common/utf8: strict steps and U+FFFD replacement, loose decoding, stream splitting.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/utf8.h"

namespace ds::utf8 {
namespace {

const std::string kFFFD(kReplacementBytes);

std::string encode(uint32_t cp) {
  std::string s;
  append(s, cp);
  return s;
}

Step step_of(const std::string& s) {
  return step(s, 0);
}

std::string sanitized(const std::string& s, bool final, size_t* used = nullptr,
                      Replace mode = Replace::kMaximalSubpart) {
  std::string out;
  const size_t n = append_sanitized(s, out, final, mode);
  if (used != nullptr) *used = n;
  return out;
}

TEST(Utf8, EncodesEveryLengthAtItsBoundaries) {
  const struct {
    uint32_t cp;
    std::string bytes;
  } cases[] = {
      {0x0, std::string(1, '\0')},
      {0x7F, "\x7F"},
      {0x80, "\xC2\x80"},
      {0x7FF, "\xDF\xBF"},
      {0x800, "\xE0\xA0\x80"},
      {0xD7FF, "\xED\x9F\xBF"},
      {0xE000, "\xEE\x80\x80"},
      {0xFFFF, "\xEF\xBF\xBF"},
      {0x10000, "\xF0\x90\x80\x80"},
      {kMaxCodePoint, "\xF4\x8F\xBF\xBF"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(encode(c.cp), c.bytes) << std::hex << c.cp;
    const Step st = step_of(c.bytes);
    EXPECT_EQ(st.kind, Step::VALID) << std::hex << c.cp;
    EXPECT_EQ(st.len, c.bytes.size()) << std::hex << c.cp;
    EXPECT_EQ(st.cp, c.cp);
    EXPECT_TRUE(is_valid(c.bytes));
    const Loose lo = decode_loose(c.bytes, 0);
    EXPECT_EQ(lo.len, c.bytes.size());
    EXPECT_EQ(lo.cp, c.cp);
  }
  EXPECT_EQ(step_of("\xC3\xA9").cp, 0xE9u);
  EXPECT_EQ(step_of("\xF0\x9F\xA6\x99").cp, 0x1F999u);
}

TEST(Utf8, StrictTruncatedSequencesAreIncomplete) {
  for (const std::string s : {"\xC3", "\xE6", "\xE6\x9D", "\xF0", "\xF0\x9F", "\xF0\x9F\xA6"}) {
    const Step st = step_of(s);
    EXPECT_EQ(st.kind, Step::INCOMPLETE);
    EXPECT_EQ(st.len, s.size());
    EXPECT_FALSE(is_valid(s));
  }
  // A prefix that is already ill-formed is invalid, not incomplete.
  EXPECT_EQ(step_of("\xE0\x80").kind, Step::INVALID);
  EXPECT_EQ(step_of("\xF4\x90").kind, Step::INVALID);
}

TEST(Utf8, StrictRejectsOverlongsSurrogatesAndTooLarge) {
  for (const std::string s : {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF", "\xF0\x80\x80\x80",
                              "\xF0\x8F\xBF\xBF",                      // overlongs
                              "\xED\xA0\x80", "\xED\xBF\xBF",          // surrogates
                              "\xF4\x90\x80\x80", "\xF5\x80\x80\x80",  // > U+10FFFF
                              "\xF8\x88\x80\x80\x80", "\xFF", "\x80", "\xBF"}) {
    EXPECT_EQ(step_of(s).kind, Step::INVALID) << testing::PrintToString(s);
    EXPECT_FALSE(is_valid(s));
  }
  // Maximal subparts: the bytes that could still have begun a well-formed sequence.
  EXPECT_EQ(step_of("\xC0\x80").len, 1u);
  EXPECT_EQ(step_of("\xED\xA0\x80").len, 1u);
  EXPECT_EQ(step_of("\xE4\x41").len, 1u);
  EXPECT_EQ(step_of("\xE4\xB8\x41").len, 2u);
  EXPECT_EQ(step_of("\xF0\x9F\xA6\x41").len, 3u);
}

TEST(Utf8, LengthCountsSubpartsAsOne) {
  EXPECT_EQ(length(""), 0u);
  EXPECT_EQ(length("é東🦙"), 3u);
  EXPECT_EQ(length("a\xE4\xB8"
                   "b"),
            3u);
  EXPECT_EQ(length("\xC0\x80"), 2u);
}

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  size_t used = 0;
  EXPECT_EQ(sanitized("ab\xE6\x9D", false, &used), "ab");  // incomplete tail held back
  EXPECT_EQ(used, 2u);
  EXPECT_EQ(sanitized("ab\xE6\x9D", true, &used), "ab" + kFFFD);
  EXPECT_EQ(used, 4u);
  EXPECT_EQ(sanitized("\x80x\xFF", false), kFFFD + "x" + kFFFD);
  EXPECT_EQ(sanitized("\xE4\xB8\x41", true), kFFFD + "A");
  EXPECT_EQ(sanitize("\xED\xA0\x80"), kFFFD + kFFFD + kFFFD);  // surrogate: each byte a subpart
  EXPECT_EQ(sanitize("\xF4\x90\x80\x80"), kFFFD + kFFFD + kFFFD + kFFFD);
  EXPECT_EQ(sanitize("\xC0\xAF"), kFFFD + kFFFD);
  EXPECT_EQ(sanitize("日本 ok"), "日本 ok");
  EXPECT_EQ(sanitize(""), "");
}

TEST(Utf8, SanitizeEachByte) {
  EXPECT_EQ(sanitize("\xE6\x97", Replace::kEachByte), kFFFD + kFFFD);
  EXPECT_EQ(sanitize("\xE4\xB8\x41", Replace::kEachByte), kFFFD + kFFFD + "A");
  EXPECT_EQ(sanitize("a\xFF", Replace::kEachByte), "a" + kFFFD);
  EXPECT_EQ(sanitize("\xED\xA0\x80", Replace::kEachByte), kFFFD + kFFFD + kFFFD);
  EXPECT_EQ(sanitize("🦙", Replace::kEachByte), "🦙");
  size_t used = 0;
  EXPECT_EQ(sanitized("x\xF0\x9F", false, &used, Replace::kEachByte), "x");
  EXPECT_EQ(used, 1u);
}

TEST(Utf8, SanitizedOutputIsAlwaysValid) {
  std::string all;
  for (int b = 0; b < 256; ++b) {
    for (int c : {0x41, 0x80, 0x9F, 0xA0, 0xBF, 0xC0}) {
      all += static_cast<char>(b);
      all += static_cast<char>(c);
    }
  }
  EXPECT_TRUE(is_valid(sanitize(all)));
  EXPECT_TRUE(is_valid(sanitize(all, Replace::kEachByte)));
}

TEST(Utf8, LooseAcceptsStructureOnly) {
  // Overlongs, surrogates and values above U+10FFFF decode to what their bits say.
  EXPECT_EQ(decode_loose("\xC0\x80", 0).len, 2u);
  EXPECT_EQ(decode_loose("\xC0\x80", 0).cp, 0u);
  EXPECT_EQ(decode_loose("\xED\xA0\x80", 0).cp, 0xD800u);
  EXPECT_EQ(decode_loose("\xF4\x90\x80\x80", 0).cp, 0x110000u);
  EXPECT_EQ(decode_loose("\xF7\xBF\xBF\xBF", 0).len, 4u);
  // Anything else is one byte that stands for itself.
  EXPECT_EQ(decode_loose("\xFF", 0).cp, 0xFFu);
  EXPECT_EQ(decode_loose("\x80", 0).len, 1u);
  EXPECT_EQ(decode_loose("\xE6\x9D", 0).len, 1u);  // truncated
  EXPECT_EQ(decode_loose("\xE6\x9D", 0).cp, 0xE6u);
  EXPECT_EQ(decode_loose("\xE6\x41\x80", 0).len, 1u);  // not a continuation
  EXPECT_EQ(decode_loose("a\xC3\xA9", 1).cp, 0xE9u);
  EXPECT_EQ(length_loose("é東🦙"), 3u);
  EXPECT_EQ(length_loose("\xE6\x9D"), 2u);
  EXPECT_EQ(boundaries_loose("aé\xFF"), (std::vector<size_t>{0, 1, 3, 4}));
  EXPECT_EQ(boundaries_loose(""), (std::vector<size_t>{0}));
}

TEST(Utf8, CompletePrefixCutsOnlyAnUnfinishedTail) {
  EXPECT_EQ(complete_prefix(""), 0u);
  EXPECT_EQ(complete_prefix("abc"), 3u);
  EXPECT_EQ(complete_prefix("a\xC3"), 1u);
  EXPECT_EQ(complete_prefix("a\xC3\xA9"), 3u);
  EXPECT_EQ(complete_prefix("a\xE6\x9D"), 1u);
  EXPECT_EQ(complete_prefix("a\xF0\x9F\x8E"), 1u);
  EXPECT_EQ(complete_prefix("a\xF0\x9F\x8E\x89"), 5u);
  EXPECT_EQ(complete_prefix("a\xFF"), 2u);                 // starts nothing: passes
  EXPECT_EQ(complete_prefix("\x80\x80\x80\x80\x80"), 5u);  // continuations only: pass
}

TEST(Utf8, SplitterNeverHandsOutPartialCharacters) {
  Splitter sp;
  std::string out;
  sp.push("a\xF0\x9F", out);
  EXPECT_EQ(out, "a");
  sp.push("\xA6", out);
  EXPECT_EQ(out, "a");
  sp.push("\x99!", out);
  EXPECT_EQ(out, "a🦙!");
  sp.flush(out);
  EXPECT_EQ(out, "a🦙!");
  sp.push("\xE6\x9D", out);
  sp.flush(out);
  EXPECT_EQ(out, "a🦙!" + kFFFD);
  sp.flush(out);  // nothing left
  EXPECT_EQ(out, "a🦙!" + kFFFD);
}

}  // namespace
}  // namespace ds::utf8
