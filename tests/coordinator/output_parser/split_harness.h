// Runs one model output through OutputParser under many chunkings (all at once, byte by
// byte, every two-chunk split, random multi-chunk splits) and checks that the streamed
// deltas and the final result never depend on the split points.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "coordinator/output_parser/output_parser.h"

namespace ds::test {

struct StreamedCall {
  std::string id;
  std::string name;
  std::string arguments;
  bool operator==(const StreamedCall&) const = default;
};

// Everything a streaming client and a non-streaming client would see.
struct Outcome {
  std::string reasoning;
  std::string content;
  std::vector<StreamedCall> calls;  // assembled from tool-call deltas
  ParseResult result;
};

struct ExpectedCall {
  std::string name;
  std::string arguments;
};

struct Expected {
  std::string reasoning;
  std::string content;
  std::vector<ExpectedCall> calls;  // result().tool_calls
  // Calls a streaming client saw, when they differ from `calls` (a name was streamed for a
  // call that later proved malformed). Empty-vector default means "same as calls".
  std::vector<ExpectedCall> streamed_calls;
  bool streamed_differs = false;
};

struct ParserSetup {
  bool thinking_open = false;
  bool tools_enabled = true;
  std::string tools_json;
  bool parallel_tool_calls = true;
};

// Options with a deterministic id generator: call_0, call_1, ...
OutputParserOptions make_options(const ParserSetup& setup);

// Feeds `text` cut at `cuts` (sorted offsets) and collects the outcome. Fails the current
// test if a delta violates the streaming contract (partial UTF-8, id/name repeated, ...).
Outcome run_chunked(const ParserSetup& setup, std::string_view text, const std::vector<size_t>& cuts);

// The full check: identical outcomes for all chunkings, equal to `expected`.
void check_all_splits(const ParserSetup& setup, std::string_view text, const Expected& expected);

// Only the invariance part: every chunking gives the outcome of feeding `text` at once.
void check_split_invariance(const ParserSetup& setup, std::string_view text);

// A small tools array used by most tests (get_weather, write_file, configure).
std::string test_tools_json();

// Tools enabled with test_tools_json(); the prompt opened a think block (thinking) or not (plain).
inline ParserSetup thinking() {
  return ParserSetup{true, true, test_tools_json()};
}
inline ParserSetup plain() {
  return ParserSetup{false, true, test_tools_json()};
}

}  // namespace ds::test
