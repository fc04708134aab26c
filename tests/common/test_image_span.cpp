// M-RoPE positions of prompts with images (common/image_span.h) against the positions the
// Hugging Face model used for the tiny vision fixture's prompts (reference/qwen35_vl.json:
// prompts[].position_ids, the three rows t, h, w), exactly: they are integers.
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/image_span.h"

namespace ds {
namespace {

rapidjson::Document vision_fixture() {
  std::ifstream in(std::string(DS_TESTDATA_DIR) + "/reference/qwen35_vl.json");
  std::stringstream text;
  text << in.rdbuf();
  rapidjson::Document doc;
  doc.Parse(text.str().c_str());
  return doc;
}

// The prompt's images where its ids hold them: each run of image_token_id after a vision start,
// with the grid of the fixture image it shows (grid_thw / spatial merge 2).
std::vector<ImageSpan> spans_of(const rapidjson::Value& fixture, const rapidjson::Value& prompt) {
  const int32_t pad = fixture["image_token_id"].GetInt();
  const auto& ids = prompt["ids"].GetArray();
  const auto& which = prompt["images"].GetArray();
  std::vector<ImageSpan> spans;
  for (uint32_t i = 0; i < ids.Size(); ++i) {
    if (ids[i].GetInt() != pad || (i > 0 && ids[i - 1].GetInt() == pad)) continue;
    const auto& grid = fixture["images"][which[spans.size()].GetUint()]["grid_thw"].GetArray();
    spans.push_back({i, grid[1].GetUint() / 2, grid[2].GetUint() / 2, spans.size()});
  }
  EXPECT_EQ(spans.size(), which.Size());
  return spans;
}

TEST(ImageSpan, MropePositionsEqualTheReferenceForEveryPrompt) {
  const rapidjson::Document doc = vision_fixture();
  ASSERT_TRUE(doc.IsObject()) << "reference/qwen35_vl.json missing or malformed";
  for (const auto& p : doc["prompts"].GetObject()) {
    SCOPED_TRACE(p.name.GetString());
    const std::vector<ImageSpan> spans = spans_of(doc, p.value);
    ASSERT_EQ(image_spans_problem(spans), nullptr);
    const size_t n = p.value["ids"].Size();
    std::vector<int32_t> t(n), h(n), w(n);
    mrope_positions(spans, 0, n, t.data(), h.data(), w.data());
    const auto& ref = p.value["position_ids"].GetArray();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(t[i], ref[0][i].GetInt()) << "t at " << i;
      ASSERT_EQ(h[i], ref[1][i].GetInt()) << "h at " << i;
      ASSERT_EQ(w[i], ref[2][i].GetInt()) << "w at " << i;
    }
    // Any window of the sequence (a prefill chunk, a decode step) gives the same values.
    for (uint32_t start : {1u, 5u, 40u, static_cast<uint32_t>(n - 1)}) {
      if (start >= n) continue;
      std::vector<int32_t> t2(n - start), h2(n - start), w2(n - start);
      mrope_positions(spans, start, n - start, t2.data(), h2.data(), w2.data());
      for (size_t i = 0; i < n - start; ++i) {
        ASSERT_EQ(t2[i], t[start + i]);
        ASSERT_EQ(h2[i], h[start + i]);
        ASSERT_EQ(w2[i], w[start + i]);
      }
    }
    // The next token (decode) continues the text positions.
    int32_t next_t = 0, next_h = 0, next_w = 0;
    mrope_positions(spans, static_cast<uint32_t>(n), 1, &next_t, &next_h, &next_w);
    EXPECT_EQ(next_t, t[n - 1] + 1);
    EXPECT_EQ(next_t, mrope_text_position(spans, static_cast<uint32_t>(n)));
    EXPECT_EQ(next_h, next_t);
    EXPECT_EQ(next_w, next_t);
  }
}

TEST(ImageSpan, ProblemsAreNamed) {
  EXPECT_STREQ(image_spans_problem({{4, 0, 3, 0}}), "an image with an empty grid");
  EXPECT_STREQ(image_spans_problem({{4, 2, 2, 0}, {6, 1, 1, 0}}), "images out of order or overlapping");
  EXPECT_EQ(image_spans_problem({{4, 2, 2, 0}, {8, 1, 1, 0}}), nullptr);
  EXPECT_EQ(image_spans_problem({}), nullptr);
}

TEST(ImageSpan, WideImageAdvancesByItsLongerSide) {
  // 2 x 5 grid at position 3: its tokens take t = 3, h = 3..4, w = 3..7; text after it at 3 + 5.
  const std::vector<ImageSpan> spans{{3, 2, 5, 0}};
  std::vector<int32_t> t(15), h(15), w(15);
  mrope_positions(spans, 0, 15, t.data(), h.data(), w.data());
  EXPECT_EQ(t[3], 3);
  EXPECT_EQ(h[12], 4);
  EXPECT_EQ(w[12], 7);
  EXPECT_EQ(t[13], 8);
  EXPECT_EQ(w[14], 9);
  EXPECT_EQ(mrope_text_position(spans, 13), 8);
}

}  // namespace
}  // namespace ds
