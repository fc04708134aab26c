// deltaserve-synth's library: the files it writes load with load_model_config, run through the
// CPU forward with finite logits, and are deterministic for a seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ggml_types.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "tools/synth/generate.h"
#include "tools/synth/shapes.h"
#include "worker/stage_model.h"

namespace ds::synth {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / ("synth_" + name + ".gguf")).string();
}

std::string write(const SynthShape& s, const std::string& name, uint64_t seed = 1, int threads = 2) {
  const std::string path = temp_path(name);
  write_synth_gguf(s, path, seed, threads);
  return path;
}

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

double spread(const std::vector<float>& v) {  // max - min: random weights must give non-flat logits
  double lo = v.at(0), hi = v.at(0);
  for (float x : v) lo = std::min<double>(lo, x), hi = std::max<double>(hi, x);
  return hi - lo;
}

TEST(Synth, TinyRoundTripsThroughModelConfig) {
  const SynthShape s = shape_by_name("tiny");
  const GgufFile g = GgufFile::open(write(s, "tiny_cfg"));
  const ModelConfig c = load_model_config(g);
  EXPECT_EQ(c.arch, "qwen35");
  EXPECT_EQ(c.n_embd, s.n_embd);
  EXPECT_EQ(c.n_layer, s.n_layer);
  EXPECT_EQ(c.n_nextn, 1u);
  EXPECT_EQ(c.n_vocab, s.n_vocab);
  EXPECT_EQ(c.head_dim, s.head_dim);
  EXPECT_EQ(c.ssm_dt_rank, s.ssm_dt_rank);
  EXPECT_EQ(c.ssm_n_group, s.ssm_n_group);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.n_attention_layers(), s.n_layer / 4);
  EXPECT_EQ(g.tensor("blk.0.attn_qkv.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(g.tensor("blk.0.ssm_conv1d.weight").type, GgmlType::F32);
  EXPECT_EQ(g.tensor("blk.0.ssm_a").type, GgmlType::F32);
  EXPECT_NE(g.find_tensor("blk.8.nextn.eh_proj.weight"), nullptr);
}

TEST(Synth, TinyRunsThroughTheCpuForwardWithFiniteLogits) {
  auto g = std::make_shared<const GgufFile>(GgufFile::open(write(shape_by_name("tiny"), "tiny_fwd")));
  const ModelConfig c = load_model_config(*g);
  StageOptions so;
  so.n_threads = 2;
  auto m = load_cpu_stage(g, c, {0, c.n_layer}, so);
  StepInput in;
  SeqStep step{1, 0, {}, {}};
  for (int32_t t = 0; t < 40; ++t) step.token_ids.push_back((t * 37 + 5) % static_cast<int32_t>(c.n_vocab));
  for (uint32_t r = 0; r < 40; ++r) step.logit_rows.push_back(r);
  in.seqs.push_back(step);
  StepOutput out;
  m->forward(in, &out);
  ASSERT_EQ(out.logits.size(), 40u * c.n_vocab);
  EXPECT_TRUE(all_finite(out.logits));
  EXPECT_GT(spread(out.logits), 0.1);
  // One decode step and the MTP head on the last position stay finite too.
  StepInput dec;
  dec.seqs.push_back({1, 40, {7}, {0}});
  StepOutput dout;
  m->forward(dec, &dout);
  EXPECT_TRUE(all_finite(dout.logits));
  std::vector<float> mtp;
  m->forward_mtp(1, 0, {9}, dout.final_hidden.data(), &mtp);
  EXPECT_EQ(mtp.size(), c.n_vocab);
  EXPECT_TRUE(all_finite(mtp));
}

// The MoE shapes: the tiny one loads as qwen35moe and runs (MTP block included, with its own
// experts); the 35B-A3B one has the published sizes (checked without writing 35 GB).
TEST(Synth, TinyMoeRunsThroughTheCpuForward) {
  auto g = std::make_shared<const GgufFile>(GgufFile::open(write(shape_by_name("tiny-moe"), "tiny_moe")));
  const ModelConfig c = load_model_config(*g);
  EXPECT_EQ(c.arch, "qwen35moe");
  EXPECT_EQ(c.n_expert, 8u);
  EXPECT_EQ(c.n_expert_used, 2u);
  EXPECT_EQ(g->tensor("blk.0.ffn_gate_exps.weight").ne[2], 8u);
  EXPECT_NE(g->find_tensor("blk.8.ffn_down_exps.weight"), nullptr);  // the MTP block's experts
  StageOptions so;
  so.n_threads = 2;
  auto m = load_cpu_stage(g, c, {0, c.n_layer}, so);
  StepInput in;
  in.seqs.push_back({1, 0, {5, 17, 99, 3, 250, 11}, {5}});
  StepOutput out;
  m->forward(in, &out);
  ASSERT_EQ(out.logits.size(), c.n_vocab);
  EXPECT_TRUE(all_finite(out.logits));
  EXPECT_GT(spread(out.logits), 0.1);
  std::vector<float> mtp;
  m->forward_mtp(1, 0, {9}, out.final_hidden.data(), &mtp);
  EXPECT_TRUE(all_finite(mtp));
}

TEST(Synth, MoeShapesHaveThePublishedSizes) {
  const SynthShape s = shape_by_name("35b-a3b");
  EXPECT_EQ(s.arch, "qwen35moe");
  EXPECT_EQ(s.n_layer, 40u);
  EXPECT_EQ(s.n_embd, 2048u);
  EXPECT_EQ(s.n_expert, 256u);
  EXPECT_EQ(s.n_expert_used, 8u);
  EXPECT_EQ(s.n_ff_exp, 512u);
  uint64_t total = 0;
  for (const TensorPlan& t : plan_tensors(s)) {
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    total += n;
  }
  EXPECT_NEAR(static_cast<double>(total), 35.1e9, 1.0e9);  // 34.66 B published, plus the MTP block
  EXPECT_EQ(shape_by_name("122b-a10b").n_embd, 3072u);
}

TEST(Synth, Reduced08BLoadsAndValidates) {
  SynthShape s = shape_by_name("0.8b");
  s.n_layer = 2;
  s.n_vocab = 4096;
  const GgufFile g = GgufFile::open(write(s, "r08"));
  const ModelConfig c = load_model_config(g);
  EXPECT_EQ(c.n_embd, 1024u);
  EXPECT_EQ(c.n_layer, 2u);
  EXPECT_EQ(c.n_nextn, 1u);
  EXPECT_EQ(c.n_head, 8u);
  EXPECT_EQ(c.n_head_kv, 2u);
  EXPECT_EQ(c.head_dim, 256u);
  EXPECT_EQ(c.n_rot, 64u);
  EXPECT_EQ(c.n_ff, 3584u);
  EXPECT_EQ(c.ssm_conv_channels(), 6144u);
  EXPECT_EQ(c.rope_sections[0], 11);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(g.get_u32("qwen35.block_count"), 3u);
}

TEST(Synth, UntiedWithoutMtpHasOutputWeightAndNoNextn) {
  SynthShape s = shape_by_name("tiny");
  s.tied = false;
  s.n_nextn = 0;
  const GgufFile g = GgufFile::open(write(s, "untied"));
  const ModelConfig c = load_model_config(g);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.n_nextn, 0u);
  EXPECT_FALSE(g.has("qwen35.nextn_predict_layers"));
  EXPECT_EQ(g.tensor("output.weight").type, GgmlType::Q8_0);
}

TEST(Synth, DeterministicForASeedWhateverTheThreadCount) {
  const SynthShape s = shape_by_name("tiny");
  const auto a = bytes_of(write(s, "det_a", 7, 1));
  const auto b = bytes_of(write(s, "det_b", 7, 4));
  const auto other = bytes_of(write(s, "det_c", 8, 2));
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), other.size());
  EXPECT_NE(a, other);
}

// SynthShape::echo (spec tests with random weights): the blocks' output projections scaled down,
// the MTP's eh_proj passing its embedding half through, so the MTP draft repeats its input token.
TEST(Synth, EchoLeansTheMtpDraftToItsInputToken) {
  SynthShape s = shape_by_name("tiny");
  s.echo = 0.8f;
  for (const TensorPlan& t : plan_tensors(s)) {
    const bool out_proj = t.name.find("attn_output") != std::string::npos ||
                          t.name.find("ssm_out") != std::string::npos || t.name.find("ffn_down") != std::string::npos;
    const bool eh = t.name.find("nextn.eh_proj") != std::string::npos;
    EXPECT_FLOAT_EQ(t.scale, out_proj || eh ? 0.2f : 1.0f) << t.name;
    EXPECT_EQ(t.plus_identity, eh) << t.name;
  }
  auto g = std::make_shared<const GgufFile>(GgufFile::open(write(s, "echo")));
  const GgufTensor& eh = g->tensor("blk.8.nextn.eh_proj.weight");  // [2D, D]: row r reads e'_r with weight ~1
  std::vector<float> row(eh.ne[0]);
  for (uint64_t r = 0; r < eh.ne[1]; r += 9) {
    dequantize_row(eh.type, eh.data + r * eh.row_bytes(), row.data(), row.size());
    EXPECT_NEAR(row[r], 1.0f, 0.2f) << r;
  }
  const ModelConfig c = load_model_config(*g);
  StageOptions so;
  so.n_threads = 2;
  auto m = load_cpu_stage(g, c, {0, c.n_layer}, so);
  int repeats = 0;
  uint64_t seq = 1;
  for (const int32_t y : {9, 100, 700, 1500, 2000}) {
    StepInput in;  // a one-token sequence; its MTP row 0 = (y, h_0)
    in.seqs.push_back({seq, 0, {5}, {0}});
    StepOutput out;
    m->forward(in, &out);
    std::vector<float> mtp;
    m->forward_mtp(seq++, 0, {y}, out.final_hidden.data(), &mtp);
    ASSERT_EQ(mtp.size(), c.n_vocab);
    repeats += std::max_element(mtp.begin(), mtp.end()) - mtp.begin() == y;
  }
  EXPECT_GE(repeats, 4);
}

TEST(Synth, UnknownShapeIsRejected) {
  EXPECT_THROW(shape_by_name("13b"), ConfigError);
}

}  // namespace
}  // namespace ds::synth
