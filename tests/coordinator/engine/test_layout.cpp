// Layout planning: balanced contiguous splits and explicit --layer-split.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "coordinator/engine/layout.h"
#include "tests/testutil/testutil.h"

namespace ds {
namespace {

std::vector<uint32_t> counts(const std::vector<StageRange>& layout) {
  std::vector<uint32_t> c;
  for (const StageRange& r : layout) c.push_back(r.last_layer - r.first_layer);
  return c;
}

TEST(Layout, EqualLayersSplitEvenly) {
  const std::vector<uint64_t> bytes(8, 100);
  EXPECT_EQ(counts(plan_balanced_layout(bytes, 1)), (std::vector<uint32_t>{8}));
  EXPECT_EQ(counts(plan_balanced_layout(bytes, 2)), (std::vector<uint32_t>{4, 4}));
  EXPECT_EQ(counts(plan_balanced_layout(bytes, 4)), (std::vector<uint32_t>{2, 2, 2, 2}));
  const std::vector<StageRange> three = plan_balanced_layout(bytes, 3);
  EXPECT_EQ(three.front().first_layer, 0u);
  EXPECT_EQ(three.back().last_layer, 8u);
  for (uint32_t c : counts(three)) EXPECT_LE(c, 3u);
}

TEST(Layout, HeavyLayersGetTheirOwnStage) {
  const std::vector<uint64_t> bytes{10, 10, 10, 10, 100, 10};
  // Optimal max is 100: the heavy layer alone, the rest grouped around it.
  const std::vector<StageRange> l = plan_balanced_layout(bytes, 3);
  ASSERT_EQ(l.size(), 3u);
  uint64_t worst = 0;
  for (const StageRange& r : l) {
    uint64_t s = 0;
    for (uint32_t i = r.first_layer; i < r.last_layer; ++i) s += bytes[i];
    worst = std::max(worst, s);
  }
  EXPECT_EQ(worst, 100u);
}

TEST(Layout, RejectsImpossibleSplits) {
  EXPECT_THROW(plan_balanced_layout(std::vector<uint64_t>(3, 1), 4), ConfigError);
  EXPECT_THROW(plan_balanced_layout(std::vector<uint64_t>(3, 1), 0), ConfigError);
  EXPECT_THROW(parse_layer_split("3,3", 8), ConfigError);
  EXPECT_THROW(parse_layer_split("3,0,5", 8), ConfigError);
  EXPECT_THROW(parse_layer_split("3,x,2", 8), ConfigError);
  EXPECT_THROW(parse_layer_split("", 8), ConfigError);
}

TEST(Layout, ExplicitSplit) {
  const std::vector<StageRange> l = parse_layer_split("3,3,2", 8);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[1].first_layer, 3u);
  EXPECT_EQ(l[1].last_layer, 6u);
  EXPECT_EQ(l[2].last_layer, 8u);
}

TEST(Layout, FixtureLayerBytes) {
  const GgufFile gguf = GgufFile::open(test::tiny_model_path());
  const ModelConfig cfg = load_model_config(gguf);
  const std::vector<uint64_t> bytes = layer_weight_bytes(gguf, cfg.n_layer);
  ASSERT_EQ(bytes.size(), cfg.n_layer);
  for (uint64_t b : bytes) EXPECT_GT(b, 0u);
  const std::vector<StageRange> l = plan_balanced_layout(bytes, 3);
  EXPECT_EQ(l.back().last_layer, cfg.n_layer);
}

}  // namespace
}  // namespace ds
