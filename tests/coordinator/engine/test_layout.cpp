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

// The last stage also runs the LM head: it gets fewer layers. Equal layers of 100 bytes and a
// head of 250: 8 layers over 2 stages split 5 + 3 (max(500, 300 + 250) = 550; 4 + 4 would be 650).
TEST(Layout, LastStageExtraBytesShiftLayersForward) {
  const std::vector<uint64_t> bytes(8, 100);
  EXPECT_EQ(counts(plan_balanced_layout(bytes, 2, 250)), (std::vector<uint32_t>{5, 3}));
  EXPECT_EQ(counts(plan_balanced_layout(bytes, 2, 0)), (std::vector<uint32_t>{4, 4}));
  EXPECT_EQ(counts(plan_balanced_layout(bytes, 3, 1000)), (std::vector<uint32_t>{3, 4, 1}))
      << "at least one layer each";
  EXPECT_EQ(counts(plan_balanced_layout(bytes, 1, 1000)), (std::vector<uint32_t>{8}));
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
  // The fixture's head: tied embeddings (no output.weight), so token_embd + output_norm; each MTP
  // draft adds the MTP block and the head again.
  uint64_t embd = 0, norm = 0, mtp = 0;
  for (const GgufTensor& t : gguf.tensors()) {
    if (t.name == "token_embd.weight") embd = t.nbytes;
    if (t.name == "output_norm.weight") norm = t.nbytes;
    if (t.name.rfind("blk." + std::to_string(cfg.n_layer) + ".", 0) == 0) mtp += t.nbytes;
  }
  ASSERT_GT(embd, 0u);
  ASSERT_GT(mtp, 0u) << "the fixture has an MTP block";
  EXPECT_EQ(last_stage_extra_bytes(gguf, cfg.n_layer, 0), embd + norm);
  EXPECT_EQ(last_stage_extra_bytes(gguf, cfg.n_layer, 2), 3 * (embd + norm) + 2 * mtp);
  // A draft vocabulary of a quarter of the ids: each draft reads a quarter of the head.
  const uint32_t quarter = cfg.n_vocab / 4;
  EXPECT_EQ(last_stage_extra_bytes(gguf, cfg.n_layer, 2, quarter),
            (embd + norm) + 2 * ((embd + norm) * quarter / cfg.n_vocab + mtp));
  EXPECT_EQ(last_stage_extra_bytes(gguf, cfg.n_layer, 2, cfg.n_vocab), 3 * (embd + norm) + 2 * mtp);
}

}  // namespace
}  // namespace ds
