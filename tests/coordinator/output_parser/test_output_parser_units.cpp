// Streaming timing, bounds and the helper pieces of the output parser.
#include <gtest/gtest.h>

#include <regex>

#include "common/utf8.h"
#include "coordinator/output_parser/json_text.h"
#include "coordinator/output_parser/output_parser.h"
#include "coordinator/output_parser/param_value.h"
#include "split_harness.h"

namespace ds::test {
namespace {

TEST(OutputParserStreaming, HoldsPossibleTagUntilDecided) {
  OutputParser p(make_options(ParserSetup{false, true, test_tools_json()}));
  EXPECT_EQ(p.feed("Hello <tool_c").content, "Hello");
  EXPECT_EQ(p.feed("x").content, " <tool_cx");
  EXPECT_EQ(p.feed(" done").content, " done");
}

TEST(OutputParserStreaming, NameBeforeArgumentsBeforeClose) {
  OutputParser p(make_options(ParserSetup{false, true, test_tools_json()}));
  EXPECT_TRUE(p.feed("<tool_call>\n<function=get_wea").empty());
  ParseDelta d = p.feed("ther>\n<parameter=city>\nPa");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].index, 0u);
  EXPECT_EQ(d.tool_calls[0].id, "call_0");
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "");
  d = p.feed("ris\n</parameter>\n");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_TRUE(d.tool_calls[0].name.empty());
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city":"Paris")");
  d = p.feed("</function>\n</tool_call>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "}");
  EXPECT_TRUE(p.finish().empty());
  ASSERT_EQ(p.result().tool_calls.size(), 1u);
  EXPECT_EQ(p.result().tool_calls[0].arguments, R"({"city":"Paris"})");
}

TEST(OutputParserStreaming, ReasoningStreamsBeforeClose) {
  OutputParser p(make_options(ParserSetup{true, true, ""}));
  EXPECT_EQ(p.feed("Step one.\n").reasoning, "Step one.");
  EXPECT_EQ(p.feed("Step two.\n</th").reasoning, "\nStep two.");
  ParseDelta d = p.feed("ink>\n\nAns");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Ans");
}

TEST(OutputParserStreaming, OverlongTagReleasedBeforeFinish) {
  OutputParser p(make_options(ParserSetup{false, true, ""}));
  const std::string text = "<function=" + std::string(OutputParser::kMaxTagBytes + 10, 'a');
  EXPECT_EQ(p.feed(text).content, text);  // decided without waiting for the end
}

TEST(OutputParserStreaming, DanglingUtf8TailBecomesReplacementChar) {
  OutputParser p(make_options(ParserSetup{false, false, ""}));
  EXPECT_EQ(p.feed("ok \xE4\xB8").content, "ok ");
  EXPECT_EQ(p.finish().content, "\xEF\xBF\xBD");
}

TEST(OutputParserIds, DefaultIdsLookLikeOpenAi) {
  OutputParserOptions o;
  o.tools_enabled = true;
  OutputParser p(std::move(o));
  p.feed("<tool_call>\n<function=f>\n</function>\n</tool_call>");
  p.finish();
  ASSERT_EQ(p.result().tool_calls.size(), 1u);
  EXPECT_TRUE(std::regex_match(p.result().tool_calls[0].id, std::regex("call_[A-Za-z0-9]{24}")));
  EXPECT_NE(random_tool_call_id(), random_tool_call_id());
}

TEST(OutputParserSchemas, BadToolsJsonMeansNoSchemas) {
  EXPECT_FALSE(ToolSchemas::parse("not json").has_tool("f"));
  EXPECT_FALSE(ToolSchemas::parse(R"({"type": "function"})").has_tool("f"));
  const ToolSchemas s = ToolSchemas::parse(R"([{"type": "function", "function": {"name": "f"}}, 3, {"x": 1}])");
  EXPECT_TRUE(s.has_tool("f"));
  EXPECT_TRUE(s.param_types("f", "p").empty());
}

TEST(OutputParserHelpers, Utf8CompletePrefix) {
  EXPECT_EQ(utf8::complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8::complete_prefix("a\xC3"), 1u);
  EXPECT_EQ(utf8::complete_prefix("a\xC3\xA9"), 3u);
  EXPECT_EQ(utf8::complete_prefix("a\xF0\x9F\x8E"), 1u);
  EXPECT_EQ(utf8::complete_prefix("a\xF0\x9F\x8E\x89"), 5u);
}

TEST(OutputParserHelpers, CompactJsonKeepsOrderAndNumbers) {
  EXPECT_EQ(compact_json(" {\"b\": 1.50, \"a\": [1e2, -0]} ").value(), R"({"b":1.50,"a":[1e2,-0]})");
  EXPECT_EQ(compact_json("12345678901234567890123").value(), "12345678901234567890123");
  EXPECT_FALSE(compact_json("{\"a\": 1} x").has_value());
  EXPECT_FALSE(compact_json("").has_value());
  EXPECT_FALSE(compact_json(std::string("1\0 2", 4)).has_value());
  EXPECT_EQ(json_quote("a\"b\\\n\x01"), R"("a\"b\\\n\u0001")");
}

TEST(OutputParserHelpers, ParamConversion) {
  EXPECT_EQ(convert_param_value(" 5 ", {"integer"}), "5");
  EXPECT_EQ(convert_param_value("5", {"string"}), "\"5\"");
  EXPECT_EQ(convert_param_value("FALSE", {"boolean"}), "false");
  EXPECT_EQ(convert_param_value("maybe", {"boolean"}), "\"maybe\"");
  EXPECT_EQ(convert_param_value("[1, {\"a\": 2}]", {"array"}), "[1,{\"a\":2}]");
  EXPECT_EQ(convert_param_value("x y", {}), "\"x y\"");
}

}  // namespace
}  // namespace ds::test
