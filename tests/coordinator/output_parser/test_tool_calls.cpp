// Tool-call extraction (XML and old JSON form, malformed calls), checked under every chunking.
#include <gtest/gtest.h>

#include "split_harness.h"

namespace ds::test {
namespace {

std::string xml_call(const std::string& name, const std::string& params) {
  return "<tool_call>\n<function=" + name + ">\n" + params + "</function>\n</tool_call>";
}
std::string param(const std::string& name, const std::string& value) {
  return "<parameter=" + name + ">\n" + value + "\n</parameter>\n";
}

TEST(OutputParserTools, TypedParametersAfterReasoning) {
  const std::string text =
      "Let me call the tool.\n</think>\n\n" +
      xml_call("configure", param("ratio", "0.75") + param("opts", "{\"verbose\": true, \"level\": 2}") +
                                param("tags", "[\"a\", \"b\"]") + param("label", "line one\nline <two> & \"three\"\n") +
                                param("limit", "10") + param("code", "007"));
  check_all_splits(thinking(), text,
                   {"Let me call the tool.",
                    "",
                    {{"configure", R"({"ratio":0.75,"opts":{"verbose":true,"level":2},"tags":["a","b"],)"
                                   R"("label":"line one\nline <two> & \"three\"\n","limit":10,"code":"007"})"}},
                    {},
                    false});
}

TEST(OutputParserTools, IntegerBooleanAndNullConversions) {
  const std::string text =
      xml_call("get_weather", param("city", "  Paris ") + param("days", " 3 ") + param("celsius", "True")) +
      xml_call("configure", param("limit", "null") + param("ratio", "-1.5e3"));
  check_all_splits(plain(), text,
                   {"",
                    "",
                    {{"get_weather", R"({"city":"  Paris ","days":3,"celsius":true})"},
                     {"configure", R"({"limit":null,"ratio":-1.5e3})"}},
                    {},
                    false});
}

TEST(OutputParserTools, MismatchedTypesFallBack) {
  const std::string text = xml_call(
      "configure", param("opts", "{not json") + param("tags", "a, b") + param("ratio", "fast") + param("limit", "2.5"));
  check_all_splits(
      plain(), text,
      {"", "", {{"configure", R"({"opts":"{not json","tags":"a, b","ratio":"fast","limit":2.5})"}}, {}, false});
}

TEST(OutputParserTools, UnknownToolIsBestEffort) {
  const std::string text =
      xml_call("mystery", param("n", "42") + param("s", "hello world") + param("o", "{\"a\": [1, 2.50]}") +
                              param("b", "false") + param("q", "\"quoted\""));
  check_all_splits(
      plain(), text,
      {"", "", {{"mystery", R"({"n":42,"s":"hello world","o":{"a":[1,2.50]},"b":false,"q":"quoted"})"}}, {}, false});
}

TEST(OutputParserTools, SeveralCallsWithTextAround) {
  const std::string text =
      "I'll check both.\n\n" +
      xml_call("get_weather", param("city", "Paris") + param("days", "3") + param("celsius", "true")) + "\n" +
      xml_call("get_weather", param("city", "New York")) + "\nDone.";
  check_all_splits(
      plain(), text,
      {"",
       "I'll check both.\nDone.",
       {{"get_weather", R"({"city":"Paris","days":3,"celsius":true})"}, {"get_weather", R"({"city":"New York"})"}},
       {},
       false});
}

TEST(OutputParserTools, MultiLineStringValue) {
  const std::string body = "def f():\n    return \"</param>\" < 1\n\n";
  const std::string text =
      xml_call("write_file", param("path", "a.py") + param("content", body) + param("mode", "420"));
  check_all_splits(
      plain(), text,
      {"",
       "",
       {{"write_file", R"({"path":"a.py","content":"def f():\n    return \"</param>\" < 1\n\n","mode":420})"}},
       {},
       false});
}

TEST(OutputParserTools, NoParametersAndSeveralFunctionsInOneBlock) {
  const std::string text = "<tool_call>\n<function=get_weather>\n</function>\n<function=write_file>\n" +
                           param("path", "x") + "</function>\n</tool_call>";
  check_all_splits(plain(), text, {"", "", {{"get_weather", "{}"}, {"write_file", R"({"path":"x"})"}}, {}, false});
}

TEST(OutputParserTools, MissingToolCallOpener) {
  const std::string text = "Checking.\n<function=get_weather>\n" + param("city", "Paris") + "</function>\n</tool_call>";
  check_all_splits(plain(), text, {"", "Checking.", {{"get_weather", R"({"city":"Paris"})"}}, {}, false});
  check_all_splits(plain(), "<function=get_weather>\n" + param("city", "Rome") + "</function>\nok",
                   {"", "ok", {{"get_weather", R"({"city":"Rome"})"}}, {}, false});
}

TEST(OutputParserTools, ClosingToolCallWithoutFunctionClose) {
  check_all_splits(plain(), "<tool_call>\n<function=get_weather>\n" + param("city", "Lima") + "</tool_call>",
                   {"", "", {{"get_weather", R"({"city":"Lima"})"}}, {}, false});
}

TEST(OutputParserTools, OldJsonForm) {
  const std::string text =
      "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3, "
      "\"ratio\": 1.50, \"nested\": {\"k\": [true, null]}}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"write_file\", \"arguments\": \"{\\\"path\\\": \\\"x\\\"}\"}\n</tool_call>\n"
      "<tool_call>{\"name\": \"get_weather\"}</tool_call>";
  check_all_splits(plain(), text,
                   {"",
                    "Sure.",
                    {{"get_weather", R"({"city":"Paris","days":3,"ratio":1.50,"nested":{"k":[true,null]}})"},
                     {"write_file", R"({"path": "x"})"},
                     {"get_weather", "{}"}},
                    {},
                    false});
}

TEST(OutputParserTools, ToolCallBeforeThinkCloseEndsReasoning) {
  const std::string call = xml_call("get_weather", param("city", "Oslo"));
  check_all_splits(thinking(), "I need the weather.\n\n" + call,
                   {"I need the weather.", "", {{"get_weather", R"({"city":"Oslo"})"}}, {}, false});
  // A late </think> after such a call is markup, not content.
  check_all_splits(thinking(), "Plan.\n" + call + "\n</think>\n\nOK",
                   {"Plan.", "OK", {{"get_weather", R"({"city":"Oslo"})"}}, {}, false});
}

TEST(OutputParserTools, UnterminatedCallBecomesText) {
  const std::string text = "Sure.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar";
  check_all_splits(plain(), text, {"", text, {}, {{"get_weather", ""}}, true});
  const std::string partial_args = "<function=get_weather>\n" + param("city", "Paris") + "<param";
  check_all_splits(plain(), partial_args, {"", partial_args, {}, {{"get_weather", R"({"city":"Paris")"}}, true});
  check_all_splits(plain(), "<tool_call>\n", {"", "<tool_call>", {}, {}, false});
  check_all_splits(plain(), "<tool_call>\n{\"name\": \"x\"", {"", "<tool_call>\n{\"name\": \"x\"", {}, {}, false});
}

TEST(OutputParserTools, UnterminatedCallInsideReasoningStaysReasoning) {
  const std::string text = "Thinking.\n<tool_call>\n<function=get_weather>\n<parameter=ci";
  check_all_splits(thinking(), text, {text, "", {}, {{"get_weather", ""}}, true});
}

TEST(OutputParserTools, BadJsonAndMissingNameBecomeText) {
  const std::string bad_json = "<tool_call>\n{\"name\": \"get_weather\", oops}\n</tool_call>\nAfter";
  check_all_splits(plain(), bad_json, {"", bad_json, {}, {}, false});
  const std::string no_name_json = "<tool_call>\n{\"arguments\": {}}\n</tool_call>";
  check_all_splits(plain(), no_name_json, {"", no_name_json, {}, {}, false});
  const std::string no_name_xml = "<tool_call>\n<function=>\n</function>\n</tool_call>";
  check_all_splits(plain(), no_name_xml, {"", no_name_xml, {}, {}, false});
  const std::string array_args = "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>";
  check_all_splits(plain(), array_args, {"", array_args, {}, {}, false});
}

TEST(OutputParserTools, GarbageInsideCallThenRecovery) {
  const std::string garbage = "<tool_call>\nhello\n</tool_call> then ";
  check_all_splits(plain(), garbage + xml_call("get_weather", ""),
                   {"", "<tool_call>\nhello\n</tool_call> then", {{"get_weather", "{}"}}, {}, false});
  // A name was streamed, then the body proved not to be markup.
  const std::string body = "<function=get_weather>\nplain text here";
  check_all_splits(plain(), body, {"", body, {}, {{"get_weather", ""}}, true});
}

TEST(OutputParserTools, OverlongNameIsReleasedAsText) {
  const std::string text = "<function=" + std::string(300, 'a') + ">\n</function>";
  check_all_splits(plain(), text, {"", text, {}, {}, false});
  const std::string spaced = "<tool_call>" + std::string(300, '\n') + "{\"name\": \"f\"}</tool_call>";
  check_all_splits(plain(), spaced, {"", spaced, {}, {}, false});
}

// parallel_tool_calls: false — the first complete call is kept; later calls are still parsed
// (their markup never shows as text) but are neither streamed nor in the result.
ParserSetup single_call(ParserSetup setup = plain()) {
  setup.parallel_tool_calls = false;
  return setup;
}

TEST(OutputParserTools, SingleCallKeepsTheFirstOfSeveralBlocks) {
  const std::string text = "I'll check both.\n\n" + xml_call("get_weather", param("city", "Paris")) + "\n" +
                           xml_call("get_weather", param("city", "New York")) + "\nDone.";
  check_all_splits(single_call(), text,
                   {"", "I'll check both.\nDone.", {{"get_weather", R"({"city":"Paris"})"}}, {}, false});
}

TEST(OutputParserTools, SingleCallKeepsTheFirstFunctionOfOneBlock) {
  const std::string text = "<tool_call>\n<function=get_weather>\n</function>\n<function=write_file>\n" +
                           param("path", "x") + "</function>\n</tool_call>";
  check_all_splits(single_call(), text, {"", "", {{"get_weather", "{}"}}, {}, false});
}

TEST(OutputParserTools, SingleCallWithJsonFormAndReasoning) {
  const std::string text =
      "Plan.\n</think>\n\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a\"}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\"}\n</tool_call>";
  check_all_splits(single_call(thinking()), text, {"Plan.", "", {{"write_file", R"({"path":"a"})"}}, {}, false});
}

TEST(OutputParserTools, SingleCallCountsOnlyWellFormedCalls) {
  // A malformed first call is text; the next well-formed one is the call returned.
  const std::string garbage = "<tool_call>\nhello\n</tool_call> then ";
  check_all_splits(single_call(), garbage + xml_call("get_weather", param("city", "Rome")) + xml_call("configure", ""),
                   {"", "<tool_call>\nhello\n</tool_call> then", {{"get_weather", R"({"city":"Rome"})"}}, {}, false});
  // A dropped call that proves malformed goes back to text, like any malformed call.
  const std::string dropped_bad = "<function=get_weather>\nplain text";
  check_all_splits(single_call(), xml_call("get_weather", "") + "\n" + dropped_bad,
                   {"", dropped_bad, {{"get_weather", "{}"}}, {}, false});
}

TEST(OutputParserTools, SingleCallSplitInvariance) {
  check_split_invariance(single_call(thinking()),
                         "Hmm <tool_call> maybe.</think>\n" + xml_call("get_weather", param("days", "2")) + "x" +
                             xml_call("configure", param("ratio", "0.5")) + "\n" + xml_call("write_file", ""));
}

}  // namespace
}  // namespace ds::test
