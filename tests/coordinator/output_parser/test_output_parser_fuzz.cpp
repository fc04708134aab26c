// Randomized robustness: outputs stitched from tag fragments, partial tags, JSON pieces and
// multi-byte characters must parse without crashing and identically under every chunking.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "split_harness.h"

namespace ds::test {
namespace {

std::string random_output(std::mt19937& rng) {
  static const char* const kPieces[] = {"<tool_call>",
                                        "</tool_call>",
                                        "<function=",
                                        "get_weather",
                                        "configure",
                                        ">",
                                        "\n",
                                        "\n\n",
                                        "<parameter=",
                                        "city",
                                        "days",
                                        "opts",
                                        "</parameter>",
                                        "</function>",
                                        "<think>",
                                        "</think>",
                                        "{",
                                        "}",
                                        "\"name\"",
                                        ":",
                                        "\"arguments\"",
                                        ",",
                                        "[1, 2]",
                                        "3",
                                        "true",
                                        "é",
                                        "\xF0\x9F\x8E\x89",
                                        " ",
                                        "<",
                                        "</",
                                        "a",
                                        "<tool_",
                                        "</par"};
  std::uniform_int_distribution<size_t> pick(0, std::size(kPieces) - 1);
  std::uniform_int_distribution<int> length(1, 40);
  std::string out;
  for (int n = length(rng); n > 0; --n) out += kPieces[pick(rng)];
  return out;
}

TEST(OutputParserFuzz, RandomOutputsAreSplitInvariant) {
  std::mt19937 rng(2024);
  for (int i = 0; i < 300 && !::testing::Test::HasFailure(); ++i) {
    const std::string text = random_output(rng);
    SCOPED_TRACE(text);
    check_split_invariance(ParserSetup{i % 2 == 0, i % 5 != 0, test_tools_json()}, text);
  }
}

}  // namespace
}  // namespace ds::test
