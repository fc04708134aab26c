// Reasoning / content splitting, checked under every chunking.
#include <gtest/gtest.h>

#include "split_harness.h"

namespace ds::test {
namespace {

TEST(OutputParserText, ReasoningOnly) {
  check_all_splits(thinking(), "The user asks about X.\nI should answer briefly.\n",
                   {"The user asks about X.\nI should answer briefly.", "", {}, {}, false});
}

TEST(OutputParserText, ReasoningThenContent) {
  check_all_splits(thinking(), "Compute 2+2.\nIt is 4.\n</think>\n\nThe answer is **4**.",
                   {"Compute 2+2.\nIt is 4.", "The answer is **4**.", {}, {}, false});
}

TEST(OutputParserText, ModelEmittedThinkOpensReasoning) {
  check_all_splits(plain(), "<think>\nHmm, greet back.\n</think>\n\nHi!", {"Hmm, greet back.", "Hi!", {}, {}, false});
}

TEST(OutputParserText, RepeatedThinkOpenerIsSwallowed) {
  check_all_splits(thinking(), "<think>\nPlan.\n</think>\n\nDone.", {"Plan.", "Done.", {}, {}, false});
}

TEST(OutputParserText, EmptyThinkBlock) {
  check_all_splits(plain(), "<think>\n\n</think>\n\nAnswer only.", {"", "Answer only.", {}, {}, false});
}

TEST(OutputParserText, NoThinking) {
  check_all_splits(plain(), "Hello there.\nSecond line.", {"", "Hello there.\nSecond line.", {}, {}, false});
}

TEST(OutputParserText, ThinkLaterInContentIsText) {
  check_all_splits(plain(), "Use <think> tags like <think>this</think>.",
                   {"", "Use <think> tags like <think>this</think>.", {}, {}, false});
}

TEST(OutputParserText, FakeTagsInContent) {
  const std::string text =
      "a < b, <thinking> is not a tag, </thin and <tool_calls> or <function x> or <b>bold</b> "
      "x<<y <tool_call";
  check_all_splits(plain(), text, {"", text, {}, {}, false});
}

TEST(OutputParserText, FakeTagsInReasoning) {
  check_all_splits(
      thinking(),
      "Consider <thinking> vs </thinking> and a<b; also </thin k <function=x>.\n</think>\n\n"
      "Done </think> here",
      {"Consider <thinking> vs </thinking> and a<b; also </thin k <function=x>.", "Done </think> here", {}, {}, false});
}

TEST(OutputParserText, PartialCloseTagAtEndIsText) {
  check_all_splits(thinking(), "abc </thin", {"abc </thin", "", {}, {}, false});
  check_all_splits(plain(), "x <tool_ca", {"", "x <tool_ca", {}, {}, false});
}

TEST(OutputParserText, MultiByteCharactersNeverSplit) {
  check_all_splits(thinking(), "Ünïcödé 思考 🎉\n</think>\n\n答案：😀 ok ×",
                   {"Ünïcödé 思考 🎉", "答案：😀 ok ×", {}, {}, false});
}

TEST(OutputParserText, InnerWhitespaceKeptOuterTrimmed) {
  const std::string spaces(300, ' ');  // longer than the held-whitespace bound
  check_all_splits(thinking(), "\n\n a" + spaces + "b\n\n\tc \n</think>\n\n  x\n\n y \n\n",
                   {"a" + spaces + "b\n\n\tc", "x\n\n y", {}, {}, false});
}

TEST(OutputParserText, EmptyOutput) {
  check_all_splits(thinking(), "", {"", "", {}, {}, false});
  check_all_splits(plain(), "", {"", "", {}, {}, false});
}

TEST(OutputParserText, ToolsDisabledKeepsMarkupAsText) {
  const std::string text = "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>";
  check_all_splits(ParserSetup{false, false, test_tools_json()}, text, {"", text, {}, {}, false});
  check_all_splits(ParserSetup{true, false, test_tools_json()}, "r <tool_call>\n</think>\n\nc",
                   {"r <tool_call>", "c", {}, {}, false});
}

}  // namespace
}  // namespace ds::test
