// common/log: JSON escaping and both line formats (the JSON lines parse with RapidJSON).
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>

#include "common/log.h"

namespace ds::log {
namespace {

rapidjson::Document parse_line(const std::string& line) {
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line per record";
  rapidjson::Document d;
  d.Parse<rapidjson::kParseValidateEncodingFlag>(line.c_str(), line.size() - 1);
  EXPECT_FALSE(d.HasParseError()) << line;
  return d;
}

TEST(Log, JsonEscape) {
  EXPECT_EQ(json_escape("plain text"), "plain text");
  EXPECT_EQ(json_escape("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(json_escape("l1\nl2\r\t\b\f"), "l1\\nl2\\r\\t\\b\\f");
  EXPECT_EQ(json_escape(std::string("\x01\x1f\x7f", 3)), "\\u0001\\u001f\\u007f");
  EXPECT_EQ(json_escape(std::string("nul\0x", 5)), "nul\\u0000x");
  EXPECT_EQ(json_escape("caf\xC3\xA9 \xE2\x9C\x93"), "caf\xC3\xA9 \xE2\x9C\x93");  // valid UTF-8 kept
  EXPECT_EQ(json_escape("bad \xFF\xC3"), "bad \xEF\xBF\xBD\xEF\xBF\xBD");          // ill-formed -> U+FFFD
  EXPECT_EQ(json_escape("</script>"), "</script>");
}

TEST(Log, ParseFormat) {
  Format f = Format::kText;
  EXPECT_TRUE(parse_format("json", &f));
  EXPECT_EQ(f, Format::kJson);
  EXPECT_TRUE(parse_format("text", &f));
  EXPECT_EQ(f, Format::kText);
  EXPECT_FALSE(parse_format("JSON", &f));
  EXPECT_FALSE(parse_format("", &f));
}

TEST(Log, TextKeepsTheHistoricalLines) {
  Config c;
  EXPECT_EQ(format_line(c, Level::kInfo, "deltaserve", "listening on http://127.0.0.1:8000 (model m)", "", 0),
            "[deltaserve] listening on http://127.0.0.1:8000 (model m)\n");
  EXPECT_EQ(format_line(c, Level::kInfo, "http", "request finished: stop", "cmpl-1", 0),
            "[http] request finished: stop request_id=cmpl-1\n");
  c.proc = "worker";
  c.rank = 3;
  EXPECT_EQ(format_line(c, Level::kError, "worker", "fatal: boom", "", 0), "[worker 3] fatal: boom\n");
}

TEST(Log, JsonLineHasEveryField) {
  Config c;
  c.format = Format::kJson;
  const std::string msg = "quote \" backslash \\ newline \n tab \t ctl \x02 bad \xFF end";
  // 2021-01-02T03:04:05.678Z
  const std::string line = format_line(c, Level::kWarn, "engine", msg, "", 1609556645678);
  rapidjson::Document d = parse_line(line);
  ASSERT_TRUE(d.IsObject());
  EXPECT_STREQ(d["ts"].GetString(), "2021-01-02T03:04:05.678Z");
  EXPECT_STREQ(d["level"].GetString(), "warn");
  EXPECT_STREQ(d["proc"].GetString(), "coordinator");
  EXPECT_TRUE(d["rank"].IsNull());
  EXPECT_STREQ(d["component"].GetString(), "engine");
  EXPECT_EQ(std::string(d["msg"].GetString()), "quote \" backslash \\ newline \n tab \t ctl \x02 bad \xEF\xBF\xBD end");
  EXPECT_TRUE(d["request_id"].IsNull());

  c.proc = "worker";
  c.rank = 1;
  d = parse_line(format_line(c, Level::kError, "worker", "fatal", "chatcmpl-\"x\"", 0));
  EXPECT_STREQ(d["ts"].GetString(), "1970-01-01T00:00:00.000Z");
  EXPECT_STREQ(d["level"].GetString(), "error");
  EXPECT_STREQ(d["proc"].GetString(), "worker");
  EXPECT_EQ(d["rank"].GetInt(), 1);
  EXPECT_STREQ(d["request_id"].GetString(), "chatcmpl-\"x\"");
}

TEST(Log, MsgBuilder) {
  EXPECT_EQ((Msg() << "rank " << 2 << " pid " << 1234u << " " << 1.5).str(), "rank 2 pid 1234 1.5");
}

}  // namespace
}  // namespace ds::log
