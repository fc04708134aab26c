// Model config of the fixture, and the fixture's dequantized Q8_0 embedding rows against the
// reference's hidden_states[0] (the token embeddings the reference was computed from): exact.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/gguf.h"
#include "common/gguf_writer.h"
#include "common/model_config.h"
#include "tests/testutil/testutil.h"

namespace ds {
namespace {

TEST(ModelConfig, TinyFixture) {
  GgufFile g = GgufFile::open(test::tiny_model_path());
  ModelConfig c = load_model_config(g);
  EXPECT_EQ(c.arch, "qwen35");
  EXPECT_EQ(c.n_embd, 64u);
  EXPECT_EQ(c.n_layer, 8u);
  EXPECT_EQ(c.n_nextn, 1u);
  EXPECT_EQ(c.mtp_block(), 8u);
  EXPECT_EQ(c.n_vocab, 151936u);
  EXPECT_EQ(c.n_head, 4u);
  EXPECT_EQ(c.n_head_kv, 2u);
  EXPECT_EQ(c.head_dim, 64u);
  EXPECT_EQ(c.n_rot, 16u);
  EXPECT_EQ(c.rope_sections, (std::array<int32_t, 4>{3, 3, 2, 0}));
  EXPECT_FLOAT_EQ(c.rope_theta, 1e7f);
  EXPECT_EQ(c.ssm_n_group, 2u);
  EXPECT_EQ(c.ssm_dt_rank, 4u);
  EXPECT_EQ(c.ssm_d_state, 32u);
  EXPECT_EQ(c.ssm_head_v_dim(), 32u);
  EXPECT_EQ(c.ssm_conv_kernel, 4u);
  EXPECT_EQ(c.n_ff, 128u);
  EXPECT_TRUE(c.tied_embeddings);
  const LayerKind L = LayerKind::kLinearAttention, F = LayerKind::kFullAttention;
  EXPECT_EQ(c.layer_kinds, (std::vector<LayerKind>{L, L, L, F, L, L, L, F}));
  EXPECT_EQ(c.gdn_key_head_for_value_head(3), 1u);
  EXPECT_EQ(c.kv_head_for_query_head(1), 0u);
  EXPECT_EQ(c.kv_head_for_query_head(2), 1u);
}

TEST(ModelConfig, EmbeddingRowsMatchReferenceExactly) {
  GgufFile g = GgufFile::open(test::tiny_model_path());
  const ModelConfig c = load_model_config(g);
  const GgufTensor& embd = g.tensor("token_embd.weight");
  ASSERT_EQ(embd.type, GgmlType::Q8_0);
  // chat_basic ids (manifest) and hidden_states[0] = their embeddings, shape [9, 19, 64].
  const std::vector<int> ids = {151644, 872, 198,    9707, 0,      3555,  374, 279,    6722, 315,
                                11862,  30,  151645, 198,  151644, 77091, 198, 151667, 198};
  const std::vector<float> hs = test::read_f32(test::data_path("reference/qwen35_chat_basic_hidden_states.f32"));
  ASSERT_EQ(hs.size(), 9u * 19u * 64u);
  std::vector<float> row(c.n_embd);
  for (size_t t = 0; t < ids.size(); ++t) {
    dequantize_row(embd.type, embd.data + embd.row_bytes() * static_cast<size_t>(ids[t]), row.data(), c.n_embd);
    for (uint32_t i = 0; i < c.n_embd; ++i) ASSERT_EQ(row[i], hs[t * 64 + i]) << "token " << t << " dim " << i;
  }
}

TEST(ModelConfig, ShapeMismatchIsAClearError) {
  GgufFile g = GgufFile::open(test::tiny_model_path());
  // Rebuild a tiny header claiming a larger hidden size than the tensors have.
  GgufWriter w;
  for (const auto& [k, v] : g.metadata()) {
    if (k == "qwen35.embedding_length") {
      w.add_u32(k, 128);
    } else if (v.type == GgufType::UINT32) {
      w.add_u32(k, static_cast<uint32_t>(v.u64));
    } else if (v.type == GgufType::STRING) {
      w.add_string(k, std::string(v.str));
    } else if (v.type == GgufType::FLOAT32) {
      w.add_f32(k, static_cast<float>(v.f64));
    }
  }
  std::vector<float> zeros(64 * 32, 0.0f);
  w.add_tensor("token_embd.weight", GgmlType::Q8_0, {64, 32}, quantize_q8_0(zeros.data(), zeros.size()));
  GgufFile bad = GgufFile::from_bytes(w.serialize());
  try {
    load_model_config(bad);
    FAIL() << "expected a config error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("token_embd.weight"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, UnsupportedArchitecture) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  GgufFile g = GgufFile::from_bytes(w.serialize());
  EXPECT_THROW(load_model_config(g), ConfigError);
}

}  // namespace
}  // namespace ds
