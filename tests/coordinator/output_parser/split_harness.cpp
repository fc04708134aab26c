#include "split_harness.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "common/utf8.h"

namespace ds::test {
namespace {

void collect(const ParseDelta& d, Outcome& out) {
  EXPECT_TRUE(utf8::is_valid(d.reasoning)) << "reasoning delta splits a character";
  EXPECT_TRUE(utf8::is_valid(d.content)) << "content delta splits a character";
  out.reasoning += d.reasoning;
  out.content += d.content;
  for (const ToolCallDelta& t : d.tool_calls) {
    if (t.index == out.calls.size()) {  // first fragment of a new call carries id and name
      EXPECT_FALSE(t.id.empty());
      EXPECT_FALSE(t.name.empty());
      out.calls.push_back({t.id, t.name, t.arguments});
      continue;
    }
    ASSERT_LT(t.index, out.calls.size()) << "tool-call index skipped";
    EXPECT_TRUE(t.id.empty() && t.name.empty()) << "id/name repeated on a later fragment";
    out.calls[t.index].arguments += t.arguments;
  }
}

void expect_same(const Outcome& a, const Outcome& b, const std::string& how) {
  EXPECT_EQ(a.reasoning, b.reasoning) << how;
  EXPECT_EQ(a.content, b.content) << how;
  EXPECT_EQ(a.calls, b.calls) << how;
  EXPECT_EQ(a.result.reasoning_content, b.result.reasoning_content) << how;
  EXPECT_EQ(a.result.content, b.result.content) << how;
  ASSERT_EQ(a.result.tool_calls.size(), b.result.tool_calls.size()) << how;
  for (size_t i = 0; i < a.result.tool_calls.size(); ++i) {
    EXPECT_EQ(a.result.tool_calls[i].id, b.result.tool_calls[i].id) << how;
    EXPECT_EQ(a.result.tool_calls[i].name, b.result.tool_calls[i].name) << how;
    EXPECT_EQ(a.result.tool_calls[i].arguments, b.result.tool_calls[i].arguments) << how;
  }
}

void expect_calls(const std::vector<ExpectedCall>& want, const std::vector<StreamedCall>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].name, got[i].name) << "call " << i;
    EXPECT_EQ(want[i].arguments, got[i].arguments) << "call " << i;
  }
}

void expect_matches(const Outcome& o, const Expected& e) {
  EXPECT_EQ(o.result.reasoning_content, e.reasoning);
  EXPECT_EQ(o.result.content, e.content);
  // The accumulated result is exactly the streamed text.
  EXPECT_EQ(o.reasoning, o.result.reasoning_content);
  EXPECT_EQ(o.content, o.result.content);
  std::vector<StreamedCall> result_calls;
  for (const ToolCall& c : o.result.tool_calls) result_calls.push_back({c.id, c.name, c.arguments});
  expect_calls(e.calls, result_calls);
  expect_calls(e.streamed_differs ? e.streamed_calls : e.calls, o.calls);
  if (!e.streamed_differs) {
    EXPECT_EQ(o.calls, result_calls);
  }
}

std::vector<size_t> random_cuts(std::mt19937& rng, size_t n, size_t max_chunk) {
  std::uniform_int_distribution<size_t> step(1, max_chunk);
  std::vector<size_t> cuts;
  for (size_t at = step(rng); at < n; at += step(rng)) cuts.push_back(at);
  return cuts;
}

}  // namespace

OutputParserOptions make_options(const ParserSetup& setup) {
  OutputParserOptions o;
  o.thinking_open = setup.thinking_open;
  o.tools_enabled = setup.tools_enabled;
  o.tools = ToolSchemas::parse(setup.tools_json);
  o.parallel_tool_calls = setup.parallel_tool_calls;
  auto counter = std::make_shared<int>(0);
  o.make_call_id = [counter] { return "call_" + std::to_string((*counter)++); };
  return o;
}

Outcome run_chunked(const ParserSetup& setup, std::string_view text, const std::vector<size_t>& cuts) {
  OutputParser parser(make_options(setup));
  Outcome out;
  size_t from = 0;
  for (size_t cut : cuts) {
    collect(parser.feed(text.substr(from, cut - from)), out);
    from = cut;
  }
  collect(parser.feed(text.substr(from)), out);
  collect(parser.finish(), out);
  EXPECT_TRUE(parser.feed("ignored after finish").empty());
  out.result = parser.result();
  return out;
}

void check_all_splits(const ParserSetup& setup, std::string_view text, const Expected& expected) {
  expect_matches(run_chunked(setup, text, {}), expected);
  if (::testing::Test::HasFailure()) return;  // one clear failure beats thousands
  check_split_invariance(setup, text);
}

void check_split_invariance(const ParserSetup& setup, std::string_view text) {
  const Outcome whole = run_chunked(setup, text, {});
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    expect_same(whole, run_chunked(setup, text, {cut}), "two chunks cut at " + std::to_string(cut));
    if (::testing::Test::HasFailure()) return;
  }
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < text.size(); ++i) every_byte.push_back(i);
  expect_same(whole, run_chunked(setup, text, every_byte), "byte by byte");

  std::mt19937 rng(12345);
  for (int round = 0; round < 200 && !::testing::Test::HasFailure(); ++round) {
    const size_t max_chunk = round % 2 == 0 ? 4 : 24;
    const auto cuts = random_cuts(rng, text.size(), max_chunk);
    expect_same(whole, run_chunked(setup, text, cuts), "random round " + std::to_string(round));
  }
}

std::string test_tools_json() {
  return R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "celsius": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "write_file", "description": "Write a file",
      "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}, "mode": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "configure", "description": "Settings",
      "parameters": {"type": "object", "properties": {
        "ratio": {"type": "number"}, "opts": {"type": "object"}, "tags": {"type": "array"},
        "label": {"type": "string"}, "limit": {"type": ["integer", "null"]},
        "code": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}}}
  ])";
}

}  // namespace ds::test
