// Small pieces: stop-string matching, auth comparison, UTF-8 sanitizing, SSE framing.
#include <gtest/gtest.h>

#include "coordinator/http/auth.h"
#include "coordinator/http/sse.h"
#include "coordinator/openai/response_json.h"
#include "coordinator/openai/stop_matcher.h"

namespace ds::test {
namespace {

using openai::StopMatcher;

std::string feed_all(StopMatcher& m, const std::vector<std::string>& parts, bool* stopped) {
  std::string out;
  *stopped = false;
  for (const auto& p : parts) {
    auto r = m.feed(p);
    out += r.text;
    if (r.stopped) {
      *stopped = true;
      return out;
    }
  }
  return out + m.flush();
}

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.feed("abc").text, "abc");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, FindsStopSplitAcrossChunks) {
  StopMatcher m({"END"});
  bool stopped = false;
  EXPECT_EQ(feed_all(m, {"hello E", "N", "D and more"}, &stopped), "hello ");
  EXPECT_TRUE(stopped);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.feed("x").text, "");
}

TEST(StopMatcher, HoldsBackOnlyPossiblePrefixes) {
  StopMatcher m({"END"});
  auto r = m.feed("abcE");
  EXPECT_EQ(r.text, "abc");  // "E" may start "END"
  r = m.feed("X");
  EXPECT_EQ(r.text, "EX");
  EXPECT_FALSE(r.stopped);
}

TEST(StopMatcher, ReleasesHeldPrefixAtTheEnd) {
  StopMatcher m({"END"});
  bool stopped = false;
  EXPECT_EQ(feed_all(m, {"abc", "EN"}, &stopped), "abcEN");
  EXPECT_FALSE(stopped);
}

TEST(StopMatcher, EarliestOfSeveralStops) {
  StopMatcher m({"world", "lo w"});
  auto r = m.feed("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "hel");
}

TEST(StopMatcher, MultiByteStop) {
  StopMatcher m({"。"});
  bool stopped = false;
  EXPECT_EQ(feed_all(m, {"你好", "。再见"}, &stopped), "你好");
  EXPECT_TRUE(stopped);
}

TEST(Auth, ConstantTimeEquals) {
  EXPECT_TRUE(constant_time_equals("abc", "abc"));
  EXPECT_FALSE(constant_time_equals("abd", "abc"));
  EXPECT_FALSE(constant_time_equals("ab", "abc"));
  EXPECT_FALSE(constant_time_equals("abcabc", "abc"));  // a repetition is not a match
  EXPECT_FALSE(constant_time_equals("", "abc"));
  EXPECT_TRUE(bearer_authorized("", ""));
  EXPECT_TRUE(bearer_authorized("Bearer k", "k"));
  EXPECT_TRUE(bearer_authorized("BEARER   k ", "k"));
  EXPECT_FALSE(bearer_authorized("Bearerk", "k"));
  EXPECT_FALSE(bearer_authorized("", "k"));
}

TEST(Utf8, SanitizeReplacesInvalidBytes) {
  EXPECT_EQ(openai::sanitize_utf8("abc"), "abc");
  EXPECT_EQ(openai::sanitize_utf8("日本"), "日本");
  EXPECT_EQ(openai::sanitize_utf8("\xe6\x97"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(openai::sanitize_utf8("a\xff"), "a\xEF\xBF\xBD");
  EXPECT_EQ(openai::sanitize_utf8("\xc0\xaf"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  EXPECT_EQ(openai::sanitize_utf8("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

TEST(Sse, Framing) {
  EXPECT_EQ(sse_event("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

}  // namespace
}  // namespace ds::test
