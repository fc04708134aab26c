// The qwen3 model (worker/models/qwen3.cpp) on the CPU backend against the independent HF
// transformers references (float32) of the tiny embedding and reranker fixtures, in its three
// heads, plus the qwen3 config and stage footprint.
//
// Tolerances: the fixtures' weights are exactly representable in Q8_0, so an exact dequantize +
// f32 compute lands within f32 rounding of the reference. Embeddings: cosine >= 0.99999 (a
// relative error of ~4e-3 would be needed to fail; f32 rounding over 2 layers is ~1e-6).
// Reranker: yes / no logits within 1e-3 absolute (the qwen35 test's budget), the score
// sigmoid(yes - no) within 1e-4 (its slope is <= 1/4, so 1e-3 on the difference moves it <= 2.5e-4;
// the observed logit error is ~1e-6). Batched vs one-by-one and chunked vs one step: the CPU
// kernels compute each token independently of the batch, so 1e-6 (observed: bit-identical).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>

#include "common/error.h"
#include "common/gguf.h"
#include "common/gguf_writer.h"
#include "common/model_config.h"
#include "common/stage_footprint.h"
#include "tests/testutil/expect_config_error.h"
#include "tests/testutil/qwen3_reference.h"
#include "tests/testutil/testutil.h"
#include "tests/worker/model_harness.h"
#include "worker/backend.h"
#include "worker/stage_model.h"

namespace ds::test {
namespace {

constexpr double kCosineMin = 0.99999;
constexpr double kLogitTol = 1e-3;
constexpr double kScoreTol = 1e-4;
constexpr float kSameTol = 1e-6f;

std::shared_ptr<const GgufFile> open_gguf(const std::string& path) {
  static std::map<std::string, std::shared_ptr<const GgufFile>> cache;
  auto& g = cache[path];
  if (!g) g = std::make_shared<const GgufFile>(GgufFile::open(path));
  return g;
}

struct Qwen3Model {
  std::shared_ptr<const GgufFile> gguf;
  ModelConfig config;
  std::unique_ptr<StageModel> stage;
};

Qwen3Model load(std::shared_ptr<const GgufFile> gguf, OutputHead head, StageRange range = {0, 0},
                CacheGeometry cache = {}) {
  Qwen3Model m;
  m.gguf = std::move(gguf);
  m.config = load_model_config(*m.gguf);
  if (range.last_layer == 0) range = {0, m.config.n_layer};
  StageOptions o;
  o.n_threads = 2;
  o.head = head;
  o.cache = cache;
  m.stage = load_cpu_stage(m.gguf, m.config, range, o);
  return m;
}

Qwen3Model load_embed(OutputHead head = OutputHead::kEmbedding) {
  return load(open_gguf(qwen3_embed_model_path()), head);
}

Qwen3Model load_rerank(OutputHead head = OutputHead::kRankClassifier) {
  return load(open_gguf(qwen3_rerank_model_path()), head);
}

std::vector<float> l2_normalized(const float* x, size_t n) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] / std::sqrt(ss));
  return out;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

uint32_t last_row(const std::vector<int32_t>& ids) {
  return static_cast<uint32_t>(ids.size() - 1);
}

// The final-normed hidden of the prompt's last row (the embedding head's output), in `chunk`-token
// steps (0: one step).
std::vector<float> last_hidden(StageModel& m, uint64_t seq, const std::vector<int32_t>& ids, size_t chunk = 0) {
  std::vector<float> hidden;
  const std::vector<float> logits = run_prompt(m, seq, ids, {last_row(ids)}, chunk, &hidden);
  EXPECT_TRUE(logits.empty()) << "the embedding head returns no logits";
  return hidden;
}

// Every sequence in one step (seq ids 1..n), each asking for its last row.
StepOutput run_batch(StageModel& m, const std::vector<std::vector<int32_t>>& prompts,
                     std::vector<SeqCache> cache = {}) {
  StepInput in;
  for (size_t i = 0; i < prompts.size(); ++i) in.seqs.push_back({i + 1, 0, prompts[i], {last_row(prompts[i])}});
  in.cache = std::move(cache);
  StepOutput out;
  m.forward(in, &out);
  return out;
}

// ---- a GGUF rewritten with edits (heads the fixtures lack, configs they do not hold) ------------

struct GgufEdit {
  std::vector<std::string> drop;                   // keys and tensors left out
  std::map<std::string, uint32_t> u32;             // keys set (added when missing)
  std::optional<std::vector<std::string>> labels;  // qwen3.classifier.output_labels
};

std::shared_ptr<const GgufFile> edited(const GgufFile& g, const GgufEdit& e) {
  const auto dropped = [&](const std::string& name) {
    return std::find(e.drop.begin(), e.drop.end(), name) != e.drop.end();
  };
  GgufWriter w;
  for (const auto& [k, v] : g.metadata()) {
    if (dropped(k) || e.u32.count(k) || (e.labels && k == "qwen3.classifier.output_labels")) continue;
    if (v.type == GgufType::UINT32) w.add_u32(k, static_cast<uint32_t>(v.u64));
    if (v.type == GgufType::FLOAT32) w.add_f32(k, static_cast<float>(v.f64));
    if (v.type == GgufType::BOOL) w.add_bool(k, v.u64 != 0);
    if (v.type == GgufType::STRING) w.add_string(k, std::string(v.str));
    if (v.type == GgufType::ARRAY && v.elem_type == GgufType::STRING && k != "tokenizer.ggml.merges") {
      w.add_string_array(k, std::vector<std::string>(v.strings.begin(), v.strings.end()));
    }
  }
  for (const auto& [k, x] : e.u32) w.add_u32(k, x);
  if (e.labels) w.add_string_array("qwen3.classifier.output_labels", *e.labels);
  for (const GgufTensor& t : g.tensors()) {
    if (dropped(t.name)) continue;
    std::vector<uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    w.add_tensor(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + t.nbytes));
  }
  return std::make_shared<const GgufFile>(GgufFile::from_bytes(w.serialize()));
}

std::shared_ptr<const GgufFile> rerank_without_cls() {
  static const auto g = edited(*open_gguf(qwen3_rerank_model_path()), GgufEdit{{"cls.output.weight"}, {}, {}});
  return g;
}

// ---- config and footprint ---------------------------------------------------------------------

TEST(Qwen3Config, EmbeddingFixtureIsDenseAttentionWithLastPooling) {
  const ModelConfig c = load_model_config(*open_gguf(qwen3_embed_model_path()));
  EXPECT_EQ(c.arch, "qwen3");
  EXPECT_EQ(c.n_layer, 2u);
  EXPECT_EQ(c.n_attention_layers(), 2u);
  EXPECT_EQ(c.n_nextn, 0u);
  EXPECT_EQ(c.n_embd, 64u);
  EXPECT_EQ(c.n_head, 2u);
  EXPECT_EQ(c.n_head_kv, 1u);
  EXPECT_EQ(c.head_dim, 32u);
  EXPECT_EQ(c.n_rot, 32u);  // no rope.dimension_count: the whole head rotates
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_sections, (std::array<int32_t, 4>{0, 0, 0, 0}));
  EXPECT_FALSE(c.attn_output_gate);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.pooling_type, 3u);
  EXPECT_FALSE(c.has_cls_head);
  EXPECT_TRUE(c.classifier_labels.empty());
  EXPECT_EQ(default_head(c), OutputHead::kEmbedding);
  EXPECT_EQ(output_head_problem(c, OutputHead::kEmbedding), "");
  EXPECT_EQ(output_head_problem(c, OutputHead::kLanguageModel), "");
  EXPECT_NE(output_head_problem(c, OutputHead::kRankClassifier).find("cls.output.weight"), std::string::npos);
  EXPECT_NE(c.describe().find("output head: embedding"), std::string::npos) << c.describe();
}

TEST(Qwen3Config, RerankerFixtureHasLabelsAndClassifierHead) {
  const ModelConfig c = load_model_config(*open_gguf(qwen3_rerank_model_path()));
  const Qwen3RerankFixture ref = load_qwen3_rerank_fixture();
  EXPECT_EQ(c.pooling_type, 4u);
  EXPECT_EQ(c.classifier_labels, (std::vector<std::string>{"yes", "no"}));
  EXPECT_EQ(c.classifier_label_tokens, (std::vector<int32_t>{ref.yes_id, ref.no_id}));
  EXPECT_TRUE(c.has_cls_head);
  EXPECT_EQ(c.n_cls_out, 2u);
  EXPECT_EQ(default_head(c), OutputHead::kRankClassifier);
  EXPECT_EQ(output_head_problem(c, OutputHead::kRankClassifier), "");
  EXPECT_NE(c.describe().find("labels: yes, no"), std::string::npos) << c.describe();
  const ModelConfig no_cls = load_model_config(*rerank_without_cls());
  EXPECT_FALSE(no_cls.has_cls_head);
  EXPECT_EQ(output_head_problem(no_cls, OutputHead::kRankClassifier), "");  // from the LM-head rows
}

TEST(Qwen3Config, QwenThreePointFiveServesOnlyTheLanguageModelHead) {
  const ModelConfig c = load_model_config(GgufFile::open(tiny_model_path()));
  EXPECT_EQ(default_head(c), OutputHead::kLanguageModel);
  EXPECT_EQ(output_head_problem(c, OutputHead::kLanguageModel), "");
  EXPECT_NE(output_head_problem(c, OutputHead::kEmbedding).find("qwen35"), std::string::npos);
  EXPECT_NE(output_head_problem(c, OutputHead::kRankClassifier).find("qwen35"), std::string::npos);
}

TEST(Qwen3Config, BadHeadsAreClearErrors) {
  const GgufFile& rerank = *open_gguf(qwen3_rerank_model_path());
  expect_config_error(
      [&] {
        load_model_config(*edited(rerank, GgufEdit{{}, {{"qwen3.pooling_type", 1}}, {}}));
      },
      "pooling_type");
  // Three labels, but cls.output has two rows.
  expect_config_error(
      [&] {
        load_model_config(*edited(rerank, GgufEdit{{}, {}, std::vector<std::string>{"yes", "no", "maybe"}}));
      },
      "cls.output.weight");
  // Without cls.output, every label must be a token.
  const ModelConfig c = load_model_config(*edited(
      rerank, GgufEdit{{"cls.output.weight"}, {}, std::vector<std::string>{"yes", "\xE2\x9F\x82-not-a-token"}}));
  EXPECT_EQ(c.classifier_label_tokens[1], -1);
  EXPECT_NE(output_head_problem(c, OutputHead::kRankClassifier).find("-not-a-token"), std::string::npos);
}

TEST(Qwen3Footprint, EveryLayerHoldsKvAndNoRecurrentState) {
  const ModelConfig c = load_model_config(*open_gguf(qwen3_rerank_model_path()));
  const CacheShapes all = stage_cache_shapes(c, {0, 2});
  EXPECT_EQ(all.n_attention_layers, 2u);
  EXPECT_EQ(all.kv_row_floats, 32u);  // 1 KV head of 32
  EXPECT_EQ(all.n_gdn_layers, 0u);
  EXPECT_EQ(all.conv_floats, 0u);
  EXPECT_EQ(all.ssm_floats, 0u);
  EXPECT_EQ(stage_cache_shapes(c, {1, 2}).n_attention_layers, 1u);  // no MTP block's KV
}

TEST(Qwen3Footprint, TheLastStageReadsOnlyItsHead) {
  const GgufFile& g = *open_gguf(qwen3_rerank_model_path());
  const ModelConfig c = load_model_config(g);
  const GgufTensor& cls = g.tensor("cls.output.weight");
  const GgufTensor& embd = g.tensor("token_embd.weight");
  EXPECT_EQ(tensor_place(cls.name, c).role, TensorRole::kClassifier);
  const StageRange first{0, 1}, last{1, 2};
  EXPECT_TRUE(stage_reads(cls, c, last, true, OutputHead::kRankClassifier));
  EXPECT_FALSE(stage_reads(cls, c, last, true, OutputHead::kLanguageModel));
  EXPECT_FALSE(stage_reads(cls, c, first, true, OutputHead::kRankClassifier));
  // The tied LM head: read by the last stage for the LM head only.
  EXPECT_TRUE(stage_reads(embd, c, last, true, OutputHead::kLanguageModel));
  EXPECT_FALSE(stage_reads(embd, c, last, true, OutputHead::kEmbedding));
  EXPECT_FALSE(stage_reads(embd, c, last, true, OutputHead::kRankClassifier));
  EXPECT_TRUE(stage_reads(embd, c, first, false, OutputHead::kEmbedding));
  const uint64_t lm = stage_weight_bytes(g, c, last, OutputHead::kLanguageModel);
  const uint64_t rank = stage_weight_bytes(g, c, last, OutputHead::kRankClassifier);
  const uint64_t none = stage_weight_bytes(g, c, last, OutputHead::kEmbedding);
  EXPECT_EQ(lm, none + embd.nbytes);
  EXPECT_EQ(rank, none + cls.nbytes);
  EXPECT_EQ(stage_weight_bytes(g, c, last), lm);  // the default is the LM head
}

// ---- the embedding head -----------------------------------------------------------------------

TEST(Qwen3Embedding, EveryCaseMatchesTheReference) {
  Qwen3Model m = load_embed();
  const size_t D = m.config.n_embd;
  double worst = 1, worst32 = 1;
  for (const Qwen3EmbedCase& c : load_qwen3_embed_cases()) {
    const std::vector<float> h = last_hidden(*m.stage, 1, c.ids);
    ASSERT_EQ(h.size(), D) << c.text;
    const double cos = cosine(l2_normalized(h.data(), D), c.embedding);
    const double cos32 = cosine(l2_normalized(h.data(), 32), c.embedding_dim32);
    EXPECT_GE(cos, kCosineMin) << c.text;
    EXPECT_GE(cos32, kCosineMin) << c.text;
    worst = std::min(worst, cos);
    worst32 = std::min(worst32, cos32);
    m.stage->drop_sequence(1);
  }
  std::printf("qwen3 embedding: worst 1 - cosine %.3g (dim 32: %.3g)\n", 1 - worst, 1 - worst32);
}

TEST(Qwen3Embedding, OneBatchEqualsOneByOne) {
  Qwen3Model m = load_embed();
  const std::vector<Qwen3EmbedCase> cases = load_qwen3_embed_cases();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<float> alone;
  for (const Qwen3EmbedCase& c : cases) {
    prompts.push_back(c.ids);
    const std::vector<float> h = last_hidden(*m.stage, 100, c.ids);
    alone.insert(alone.end(), h.begin(), h.end());
  }
  const StepOutput out = run_batch(*m.stage, prompts);
  EXPECT_TRUE(out.logits.empty());
  EXPECT_TRUE(out.digests.empty());
  EXPECT_LE(max_abs_diff(out.final_hidden, alone), kSameTol);
}

TEST(Qwen3Embedding, ChunkedPrefillEqualsOneStep) {
  Qwen3Model m = load_embed();
  for (const Qwen3EmbedCase& c : load_qwen3_embed_cases()) {
    const size_t chunk = (c.ids.size() + 1) / 2;  // two forward calls
    EXPECT_LE(max_abs_diff(last_hidden(*m.stage, 2, c.ids, chunk), last_hidden(*m.stage, 3, c.ids)), kSameTol)
        << c.text;
  }
}

TEST(Qwen3Embedding, DigestRequestsAndEditsAreIgnored) {
  Qwen3Model m = load_embed();
  const Qwen3EmbedCase c = load_qwen3_embed_cases()[0];
  StepInput in;
  in.seqs.push_back({5, 0, c.ids, {0, last_row(c.ids)}});
  in.digest_rows.resize(2);
  in.logit_edits.push_back(LogitEdit{0, 7, 1.0f, 1.0f, -100.0f});
  StepOutput out;
  m.stage->forward(in, &out);
  EXPECT_TRUE(out.logits.empty());
  EXPECT_TRUE(out.digests.empty());
  EXPECT_EQ(out.digest_n_vocab, 0u);
  ASSERT_EQ(out.final_hidden.size(), 2 * m.config.n_embd);
  const std::vector<float> last(out.final_hidden.begin() + m.config.n_embd, out.final_hidden.end());
  EXPECT_GE(cosine(l2_normalized(last.data(), last.size()), c.embedding), kCosineMin);
}

TEST(Qwen3Embedding, TwoStagesEqualOne) {
  const auto gguf = open_gguf(qwen3_embed_model_path());
  Qwen3Model s0 = load(gguf, OutputHead::kEmbedding, {0, 1});
  Qwen3Model s1 = load(gguf, OutputHead::kEmbedding, {1, 2});
  Qwen3Model whole = load(gguf, OutputHead::kEmbedding);
  const Qwen3EmbedCase c = load_qwen3_embed_cases()[2];
  const size_t T = c.ids.size(), D = s0.config.n_embd;
  StepInput in;
  in.seqs.push_back({1, 0, c.ids, {last_row(c.ids)}});
  StepOutput out0, out1;
  s0.stage->forward(in, &out0);
  EXPECT_TRUE(out0.final_hidden.empty());  // not the last stage
  std::vector<float> rows(T * D);
  s0.stage->backend().download(rows.data(), s0.stage->output_rows(), T * D);
  s1.stage->backend().upload(s1.stage->input_rows(T), rows.data(), T * D);
  s1.stage->forward(in, &out1);
  EXPECT_LE(max_abs_diff(out1.final_hidden, last_hidden(*whole.stage, 1, c.ids)), kSameTol);
}

// ---- the language-model head --------------------------------------------------------------------

TEST(Qwen3LanguageModel, EmbeddingGgufServesLogits) {
  Qwen3Model lm = load_embed(OutputHead::kLanguageModel);
  Qwen3Model emb = load_embed();
  const Qwen3EmbedCase c = load_qwen3_embed_cases()[1];
  const size_t V = lm.config.n_vocab;
  std::vector<float> hidden;
  const std::vector<float> logits = run_prompt(*lm.stage, 1, c.ids, {0, last_row(c.ids)}, 0, &hidden);
  ASSERT_EQ(logits.size(), 2 * V);
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  // The head's input is the embedding head's output.
  const std::vector<float> last(hidden.end() - static_cast<std::ptrdiff_t>(lm.config.n_embd), hidden.end());
  EXPECT_LE(max_abs_diff(last, last_hidden(*emb.stage, 1, c.ids)), kSameTol);
}

TEST(Qwen3LanguageModel, DecodeContinuesTheKvCache) {
  Qwen3Model m = load_embed(OutputHead::kLanguageModel);
  const std::vector<int32_t> ids = load_qwen3_embed_cases()[2].ids;
  const size_t V = m.config.n_vocab;
  // The last row computed as one decode step after the rest equals the whole prompt in one step.
  const std::vector<float> whole = run_prompt(*m.stage, 1, ids, {last_row(ids)});
  const std::vector<int32_t> head(ids.begin(), ids.end() - 1);
  run_prompt(*m.stage, 2, head, {});
  StepInput in;
  in.seqs.push_back({2, last_row(ids), {ids.back()}, {0}});
  StepOutput out;
  m.stage->forward(in, &out);
  ASSERT_EQ(out.logits.size(), V);
  EXPECT_LE(max_abs_diff(out.logits, whole), kSameTol);
}

// ---- the rank classifier head -------------------------------------------------------------------

// Checks [n, 2] rank logits against the reference cases; returns the worst logit and score errors.
std::pair<double, double> expect_rerank_matches(const std::vector<float>& logits,
                                                const std::vector<Qwen3RerankCase>& cases) {
  EXPECT_EQ(logits.size(), 2 * cases.size());
  double worst_logit = 0, worst_score = 0;
  for (size_t i = 0; i < cases.size() && 2 * i + 1 < logits.size(); ++i) {
    const double yes = logits[2 * i], no = logits[2 * i + 1];
    const double score = 1 / (1 + std::exp(no - yes));
    EXPECT_NEAR(yes, cases[i].yes_logit, kLogitTol) << cases[i].document;
    EXPECT_NEAR(no, cases[i].no_logit, kLogitTol) << cases[i].document;
    EXPECT_NEAR(score, cases[i].score, kScoreTol) << cases[i].document;
    worst_logit = std::max({worst_logit, std::fabs(yes - cases[i].yes_logit), std::fabs(no - cases[i].no_logit)});
    worst_score = std::max(worst_score, std::fabs(score - cases[i].score));
  }
  return {worst_logit, worst_score};
}

std::vector<float> rank_one_by_one(StageModel& m, const std::vector<Qwen3RerankCase>& cases, size_t chunk = 0) {
  std::vector<float> logits;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<float> l = run_prompt(m, 50 + i, cases[i].ids, {last_row(cases[i].ids)}, chunk);
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

TEST(Qwen3Rerank, EveryCaseMatchesTheReference) {
  Qwen3Model m = load_rerank();
  const std::vector<Qwen3RerankCase> cases = load_qwen3_rerank_fixture().cases;
  const auto [logit_err, score_err] = expect_rerank_matches(rank_one_by_one(*m.stage, cases), cases);
  std::printf("qwen3 rerank: worst logit error %.3g, worst score error %.3g\n", logit_err, score_err);
}

TEST(Qwen3Rerank, OneBatchEqualsOneByOne) {
  Qwen3Model m = load_rerank();
  const std::vector<Qwen3RerankCase> cases = load_qwen3_rerank_fixture().cases;
  std::vector<std::vector<int32_t>> prompts;
  for (const Qwen3RerankCase& c : cases) prompts.push_back(c.ids);
  const StepOutput out = run_batch(*m.stage, prompts);
  EXPECT_TRUE(out.digests.empty());
  EXPECT_LE(max_abs_diff(out.logits, rank_one_by_one(*m.stage, cases)), kSameTol);
  expect_rerank_matches(out.logits, cases);
}

TEST(Qwen3Rerank, ChunkedPrefillEqualsOneStep) {
  Qwen3Model m = load_rerank();
  const std::vector<Qwen3RerankCase> cases = load_qwen3_rerank_fixture().cases;
  EXPECT_LE(max_abs_diff(rank_one_by_one(*m.stage, cases, 40), rank_one_by_one(*m.stage, cases)), kSameTol);
}

TEST(Qwen3Rerank, ManagedMemoryEqualsSelfManaged) {
  Qwen3Model self = load_rerank();
  CacheGeometry g;
  g.block_size = 16;
  g.num_blocks = 48;
  g.max_seqs = 4;
  Qwen3Model managed = load(open_gguf(qwen3_rerank_model_path()), OutputHead::kRankClassifier, {0, 0}, g);
  const std::vector<Qwen3RerankCase> cases = load_qwen3_rerank_fixture().cases;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SeqCache> placements;
  uint32_t next_block = 47;  // scattered, descending blocks
  for (size_t i = 0; i < cases.size(); ++i) {
    prompts.push_back(cases[i].ids);
    SeqCache c;
    c.state_slot = static_cast<uint32_t>(i);
    c.is_new = true;
    for (size_t r = 0; r < cases[i].ids.size(); r += g.block_size) c.block_ids.push_back(next_block--);
    placements.push_back(std::move(c));
  }
  const StepOutput out = run_batch(*managed.stage, prompts, placements);
  EXPECT_LE(max_abs_diff(out.logits, rank_one_by_one(*self.stage, cases)), kSameTol);
}

TEST(Qwen3Rerank, LabelRowsOfTheLmHeadEqualTheClassifier) {
  // The fixture's cls.output is the LM head's [yes, no] rows: without it, the head built from
  // those rows must give the same scores, and so must the LM head's logits of those tokens.
  const Qwen3RerankFixture ref = load_qwen3_rerank_fixture();
  Qwen3Model cls = load_rerank();
  Qwen3Model rows = load(rerank_without_cls(), OutputHead::kRankClassifier);
  Qwen3Model lm = load_rerank(OutputHead::kLanguageModel);
  const std::vector<float> want = rank_one_by_one(*cls.stage, ref.cases);
  EXPECT_LE(max_abs_diff(rank_one_by_one(*rows.stage, ref.cases), want), kSameTol);
  const std::vector<float> full = rank_one_by_one(*lm.stage, ref.cases);
  const size_t V = lm.config.n_vocab;
  ASSERT_EQ(full.size(), ref.cases.size() * V);
  for (size_t i = 0; i < ref.cases.size(); ++i) {
    EXPECT_NEAR(full[i * V + ref.yes_id], want[2 * i], kSameTol);
    EXPECT_NEAR(full[i * V + ref.no_id], want[2 * i + 1], kSameTol);
  }
}

// ---- heads a model cannot serve, and steps qwen3 cannot run -------------------------------------

TEST(Qwen3Heads, WrongHeadIsAConfigError) {
  expect_config_error([] { load_embed(OutputHead::kRankClassifier); }, "cls.output.weight");
  const auto q35 = std::make_shared<const GgufFile>(GgufFile::open(tiny_model_path()));
  expect_config_error([&] { load(q35, OutputHead::kEmbedding); }, "qwen35");
  expect_config_error([&] { load(q35, OutputHead::kRankClassifier); }, "qwen35");
  const auto bad_label = edited(*open_gguf(qwen3_rerank_model_path()),
                                GgufEdit{{"cls.output.weight"}, {}, std::vector<std::string>{"yes", "nope-nope"}});
  expect_config_error([&] { load(bad_label, OutputHead::kRankClassifier); }, "'nope-nope'");
}

TEST(Qwen3Heads, DraftsAndMtpAreRefused) {
  Qwen3Model m = load_embed(OutputHead::kLanguageModel);
  StepInput in;
  SeqStep s{1, 0, {1, 2, 3}, {2}};
  s.n_draft = 1;
  in.seqs.push_back(s);
  StepOutput out;
  EXPECT_THROW(m.stage->forward(in, &out), ConfigError);
  std::vector<float> logits, hidden(m.config.n_embd, 0.0f);
  EXPECT_THROW(m.stage->forward_mtp(1, 0, {1}, hidden.data(), &logits), ConfigError);
}

}  // namespace
}  // namespace ds::test
