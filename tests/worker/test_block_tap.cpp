// The named-intermediate tap (StageOptions::tap): every block's output arrives under its name,
// "blk.N.out" equals the residual stream the reference test compares (layer_hidden), and the
// tap changes no result.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/model_config.h"
#include "tests/testutil/testutil.h"
#include "tests/worker/model_harness.h"

namespace ds::test {
namespace {

TEST(BlockTap, NamesEveryBlockOutputAndChangesNothing) {
  const auto gguf = std::make_shared<const GgufFile>(GgufFile::open(tiny_model_path()));
  const ModelConfig cfg = load_model_config(*gguf);
  std::map<std::string, std::vector<float>> seen;
  StageOptions o;
  o.keep_all_hidden = true;
  o.tap = [&](const std::string& name, const std::vector<float>& rows, size_t width) {
    EXPECT_EQ(rows.size() % width, 0u) << name;
    seen[name] = rows;
  };
  auto tapped = load_cpu_stage(gguf, cfg, {0, cfg.n_layer}, o);
  LoadedModel plain = load_fixture();
  const std::vector<int32_t> ids = {9707, 1879, 11, 1246, 525, 498, 30};
  const std::vector<uint32_t> rows = {6};
  const std::vector<float> a = run_prompt(*tapped, 1, ids, rows, 0, nullptr);
  const std::vector<float> b = run_prompt(*plain.stage, 1, ids, rows, 0, nullptr);
  EXPECT_EQ(a, b);  // bit for bit: the tap only reads
  for (uint32_t l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool attn = cfg.layer_kinds[l] == LayerKind::kFullAttention;
    for (const char* what : {attn ? "attn_core" : "gdn_core", attn ? "attn_out" : "gdn_out", "ffn_out", "out"}) {
      EXPECT_EQ(seen.count(p + what), 1u) << p + what;
    }
    ASSERT_EQ(seen[p + "out"].size(), ids.size() * cfg.n_embd);
    EXPECT_EQ(seen[p + "out"], tapped->layer_hidden()[l]) << p;
  }
}

}  // namespace
}  // namespace ds::test
