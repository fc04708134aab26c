// deltaserve-perplexity's computation (tools/perplexity_core.h): perplexity on the trained small
// model against its Hugging Face float32 reference, a base file read back against the run that
// wrote it, refused bases, the windows, and the ids file parser.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/model_config.h"
#include "tools/perplexity_core.h"
#include "worker/stage_model.h"

namespace {

using ds::ppl::PplError;

struct HeldOut {
  std::vector<int32_t> ids;
  double ppl = 0;
};

// tests/data/reference/small_heldout.json.gz: two held-out files of the small model's manifest
// (fixtures/small-reference/small_manifest.json), ids and the Hugging Face float32 ppl.
std::vector<HeldOut> load_heldout() {
  std::ifstream f(std::string(DS_TESTDATA_DIR) + "/reference/small_heldout.json");
  std::stringstream s;
  s << f.rdbuf();
  rapidjson::Document d;
  d.Parse(s.str().c_str());
  std::vector<HeldOut> out;
  if (d.HasParseError() || !d.IsObject()) return out;
  for (const auto& h : d["heldout"].GetArray()) {
    HeldOut x;
    for (const auto& id : h["ids"].GetArray()) x.ids.push_back(id.GetInt());
    x.ppl = h["ppl"].GetDouble();
    out.push_back(std::move(x));
  }
  return out;
}

class SmallModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto gguf = std::make_shared<const ds::GgufFile>(
        ds::GgufFile::open(std::string(DS_TESTDATA_DIR) + "/small-qwen35-q8_0.gguf"));
    cfg_ = ds::load_model_config(*gguf);
    ds::StageOptions so;
    so.n_threads = 2;
    model_ = ds::load_cpu_stage(gguf, cfg_, {0, cfg_.n_layer}, so).release();
    heldout_ = new std::vector<HeldOut>(load_heldout());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete heldout_;
  }
  void SetUp() override { ASSERT_EQ(heldout_->size(), 2u) << "small_heldout.json did not load"; }

  static inline ds::ModelConfig cfg_;
  static inline ds::StageModel* model_ = nullptr;
  static inline std::vector<HeldOut>* heldout_ = nullptr;
};

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid());
}

// The reference ppl comes from the Hugging Face float32 model, and our CPU f32 path matches its
// logits within ~4e-5: each position's nll (logsumexp minus the next id's logit) then moves by at
// most 2 x 4e-5, and the ppl by at most ~8e-5 relative, inside 1e-4. A wrong position, window or
// softmax moves it far more (one position's nll off by 1 nat moves these ppls by > 2.6e-3).
constexpr double kPplRelTol = 1e-4;

TEST_F(SmallModel, CpuF32PerplexityMatchesTheReferenceOnAHeldOutFile) {
  const HeldOut& h = (*heldout_)[0];
  const ds::ppl::Report r = ds::ppl::evaluate(h.ids, cfg_.n_vocab, {}, ds::ppl::stage_logits(*model_, 0));
  EXPECT_EQ(r.n_positions, h.ids.size() - 1);
  EXPECT_EQ(r.n_windows, 1u);
  EXPECT_NEAR(r.ppl, h.ppl, kPplRelTol * h.ppl);
}

// Windows are fresh sequences: ppl over two windows of 64 is the geometric mean of each window
// evaluated on its own (the second window does not see the first one's state).
TEST_F(SmallModel, EachWindowIsAFreshSequence) {
  const std::vector<int32_t>& ids = (*heldout_)[0].ids;
  const std::vector<int32_t> a(ids.begin(), ids.begin() + 64), b(ids.begin() + 64, ids.begin() + 128);
  std::vector<int32_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  const ds::ppl::WindowLogits logits = ds::ppl::stage_logits(*model_, 0);
  ds::ppl::Options o;
  o.ctx = 64;
  const ds::ppl::Report w = ds::ppl::evaluate(both, cfg_.n_vocab, o, logits);
  const ds::ppl::Report ra = ds::ppl::evaluate(a, cfg_.n_vocab, {}, logits);
  const ds::ppl::Report rb = ds::ppl::evaluate(b, cfg_.n_vocab, {}, logits);
  ASSERT_EQ(w.n_positions, 126u);
  EXPECT_NEAR(std::log(w.ppl), (std::log(ra.ppl) + std::log(rb.ppl)) / 2, 1e-12);  // same logits, same order
}

// u: the relative rounding of a stored log-prob (f16 to nearest, after an f32 step).
constexpr double kU = 0x1p-11 * (1 + 0x1p-13);

// The largest and the mean per-position bound u^2 E_p[lp^2] / 2 of the KL of a stored base
// against its own run (perplexity_core.h), over a window's logits.
void kl_bounds(const std::vector<float>& logits, size_t n_vocab, double* max_bound, double* mean_bound) {
  const size_t rows = logits.size() / n_vocab;
  std::vector<double> lp;
  *max_bound = 0;
  double sum = 0;
  for (size_t r = 0; r < rows; ++r) {
    ds::ppl::row_stats(logits.data() + r * n_vocab, n_vocab, 0, &lp);
    double e = 0;
    for (const double x : lp) e += std::exp(x) * x * x;
    const double bound = kU * kU * e / 2;
    *max_bound = std::max(*max_bound, bound);
    sum += bound;
  }
  *mean_bound = sum / static_cast<double>(rows);
}

TEST_F(SmallModel, BaseReadAgainstTheRunThatSavedItGivesZeroKlAndFullTopOneAgreement) {
  const HeldOut& h = (*heldout_)[1];
  std::vector<float> cached;  // one forward for both runs: the second run is the very same logits
  const ds::ppl::WindowLogits model = ds::ppl::stage_logits(*model_, 0);
  const ds::ppl::WindowLogits logits = [&](size_t seq, const std::vector<int32_t>& t, std::vector<float>* out) {
    if (cached.empty()) model(seq, t, &cached);
    *out = cached;
  };
  ds::ppl::Options save;
  save.save_base = temp_path("ppl_base.bin");
  const ds::ppl::Report saved = ds::ppl::evaluate(h.ids, cfg_.n_vocab, save, logits);
  EXPECT_NEAR(saved.ppl, h.ppl, kPplRelTol * h.ppl);  // the second held-out file's reference

  ds::ppl::Options kl;
  kl.kl_base = save.save_base;
  const ds::ppl::Report r = ds::ppl::evaluate(h.ids, cfg_.n_vocab, kl, logits);
  std::remove(save.save_base.c_str());
  ASSERT_TRUE(r.has_kl);
  EXPECT_EQ(r.base_ppl, r.ppl);  // the nll is stored exactly
  EXPECT_EQ(r.top1_pct, 100.0);  // and so is the argmax
  double max_bound = 0, mean_bound = 0;
  kl_bounds(cached, cfg_.n_vocab, &max_bound, &mean_bound);
  EXPECT_GE(r.kl_mean, 0.0);
  // The second-order bound, with 10% for the higher orders (the rounding errors are < 0.04 even
  // at the clamp, where p is 0 anyway).
  EXPECT_LE(r.kl_max, 1.1 * max_bound) << "mean " << r.kl_mean;
  EXPECT_LE(r.kl_mean, 1.1 * mean_bound);
  EXPECT_LE(r.kl_p99, r.kl_max);
}

// The q8_0 KV cache on the trained model (issue 30's CI check): KL against the f32 CPU base below
// the default's 0.001 bound on both held-out files (measured 2.7e-6..1.4e-5 over six files,
// docs/PERFORMANCE.md), top-1 within 1% of the base; f16 KV at the f16 base's floor; fp8 (no
// scale) clearly worse than q8_0, so the comparison can fail. A KV type that wrote or read the
// wrong rows would put KL at the scale of unrelated distributions (> 0.1).
TEST_F(SmallModel, QuantizedKvCachesStayWithinTheirKlBounds) {
  auto gguf = std::make_shared<const ds::GgufFile>(
      ds::GgufFile::open(std::string(DS_TESTDATA_DIR) + "/small-qwen35-q8_0.gguf"));
  const auto with_kv = [&](ds::KvType t) {
    ds::StageOptions so;
    so.n_threads = 2;
    so.cache.k_type = so.cache.v_type = t;
    return ds::load_cpu_stage(gguf, cfg_, {0, cfg_.n_layer}, so);
  };
  const auto q8 = with_kv(ds::KvType::kQ8_0), f16 = with_kv(ds::KvType::kF16), fp8 = with_kv(ds::KvType::kFp8);
  for (size_t i = 0; i < heldout_->size(); ++i) {
    const HeldOut& h = (*heldout_)[i];
    ds::ppl::Options save;
    save.save_base = temp_path("ppl_kv_base_" + std::to_string(i));
    ds::ppl::evaluate(h.ids, cfg_.n_vocab, save, ds::ppl::stage_logits(*model_, 0));
    ds::ppl::Options kl;
    kl.kl_base = save.save_base;
    const ds::ppl::Report rq = ds::ppl::evaluate(h.ids, cfg_.n_vocab, kl, ds::ppl::stage_logits(*q8, 0));
    const ds::ppl::Report rh = ds::ppl::evaluate(h.ids, cfg_.n_vocab, kl, ds::ppl::stage_logits(*f16, 0));
    const ds::ppl::Report r8 = ds::ppl::evaluate(h.ids, cfg_.n_vocab, kl, ds::ppl::stage_logits(*fp8, 0));
    std::remove(save.save_base.c_str());
    EXPECT_LE(rq.kl_mean, 1e-3) << "file " << i;
    EXPECT_GE(rq.top1_pct, 99.0) << "file " << i;
    EXPECT_LE(rh.kl_mean, 2e-6) << "file " << i;  // the f16 base's floor is ~8e-7
    EXPECT_GT(r8.kl_mean, 4 * rq.kl_mean) << "file " << i;
  }
}

// Deterministic fake logits over a small vocabulary (no model): row r of a window is a ramp
// shifted by the window's first token and r, so the base depends on the ids.
ds::ppl::WindowLogits fake_logits(size_t n_vocab, std::vector<size_t>* window_sizes = nullptr) {
  return [n_vocab, window_sizes](size_t, const std::vector<int32_t>& t, std::vector<float>* out) {
    if (window_sizes) window_sizes->push_back(t.size());
    out->assign((t.size() - 1) * n_vocab, 0.0f);
    for (size_t r = 0; r + 1 < t.size(); ++r)
      for (size_t i = 0; i < n_vocab; ++i)
        (*out)[r * n_vocab + i] = static_cast<float>(((i + r + static_cast<size_t>(t[0])) % n_vocab)) * 0.25f;
  };
}

std::vector<int32_t> ramp_ids(size_t n, int32_t first, size_t n_vocab) {
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((static_cast<size_t>(first) + 7 * i) % n_vocab);
  return ids;
}

void expect_refused(const std::vector<int32_t>& ids, size_t n_vocab, size_t ctx, const std::string& base,
                    const std::string& why) {
  ds::ppl::Options o;
  o.ctx = ctx;
  o.kl_base = base;
  try {
    ds::ppl::evaluate(ids, n_vocab, o, fake_logits(n_vocab));
    ADD_FAILURE() << "a base from another input was accepted (expected: " << why << ")";
  } catch (const PplError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(PerplexityBase, BaseFromOtherIdsVocabularyOrWindowsIsRefused) {
  constexpr size_t kVocab = 64;
  const std::vector<int32_t> ids = ramp_ids(40, 3, kVocab);
  ds::ppl::Options save;
  save.save_base = temp_path("ppl_refuse.bin");
  ds::ppl::evaluate(ids, kVocab, save, fake_logits(kVocab));

  std::vector<int32_t> other = ids;
  other[17] = (other[17] + 1) % static_cast<int32_t>(kVocab);  // same length, one id differs
  expect_refused(other, kVocab, 0, save.save_base, "other token ids");
  expect_refused(ramp_ids(41, 3, kVocab), kVocab, 0, save.save_base, "token ids numbering 40");
  expect_refused(ids, kVocab + 1, 0, save.save_base, "vocabulary of 64");
  expect_refused(ids, kVocab, 20, save.save_base, "windows of 40");
  expect_refused(ids, kVocab, 0, temp_path("no_such_base.bin"), "cannot open base file");

  std::filesystem::resize_file(save.save_base, 1000);  // a truncated base
  expect_refused(ids, kVocab, 0, save.save_base, "truncated or corrupt");
  std::ofstream(save.save_base, std::ios::binary | std::ios::trunc)
      << "not a base file at all, just text that is longer than a header of 56 bytes";
  expect_refused(ids, kVocab, 0, save.save_base, "bad magic");
  std::remove(save.save_base.c_str());
}

TEST(PerplexityWindows, Ctx256Over1024IdsPredicts4x255PositionsInFreshWindows) {
  constexpr size_t kVocab = 32;
  std::vector<size_t> sizes;
  ds::ppl::Options o;
  o.ctx = 256;
  const ds::ppl::Report r = ds::ppl::evaluate(ramp_ids(1024, 1, kVocab), kVocab, o, fake_logits(kVocab, &sizes));
  EXPECT_EQ(r.n_windows, 4u);
  EXPECT_EQ(r.n_positions, 4u * 255u);
  EXPECT_EQ(sizes, std::vector<size_t>(4, 256));

  const std::vector<ds::ppl::Window> w = ds::ppl::cut_windows(1000, 256);  // the last one is shorter
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[3].begin, 768u);
  EXPECT_EQ(w[3].n_tokens, 232u);
  EXPECT_EQ(ds::ppl::predicted_positions(w), 3u * 255u + 231u);
  EXPECT_EQ(ds::ppl::cut_windows(1000, 0).size(), 1u);

  sizes.clear();  // 1025 ids: a last window of one token, which predicts nothing and is not run
  const ds::ppl::Report r1 = ds::ppl::evaluate(ramp_ids(1025, 1, kVocab), kVocab, o, fake_logits(kVocab, &sizes));
  EXPECT_EQ(r1.n_windows, 5u);
  EXPECT_EQ(r1.n_positions, 4u * 255u);
  EXPECT_EQ(sizes, std::vector<size_t>(4, 256));
}

TEST(PerplexityWindows, UniformLogitsGiveTheVocabularySizeAsPerplexity) {
  constexpr size_t kVocab = 50;
  const ds::ppl::WindowLogits uniform = [](size_t, const std::vector<int32_t>& t, std::vector<float>* out) {
    out->assign((t.size() - 1) * kVocab, 3.5f);
  };
  const ds::ppl::Report r = ds::ppl::evaluate(ramp_ids(100, 0, kVocab), kVocab, {}, uniform);
  EXPECT_NEAR(r.ppl, 50.0, 1e-9);
  EXPECT_NE(ds::ppl::report_json(r).find("\"n_positions\": 99"), std::string::npos) << ds::ppl::report_json(r);
}

TEST(PerplexityWindows, IdsOutsideTheVocabularyOrNothingToPredictAreErrors) {
  EXPECT_THROW(ds::ppl::evaluate({1, 2, 99}, 50, {}, fake_logits(50)), PplError);
  EXPECT_THROW(ds::ppl::evaluate({1}, 50, {}, fake_logits(50)), PplError);
  EXPECT_THROW(ds::ppl::evaluate({}, 50, {}, fake_logits(50)), PplError);
}

TEST(PerplexityIds, ReadsJsonArraysAndWhitespaceSeparatedIds) {
  EXPECT_EQ(ds::ppl::parse_ids(" [1, 2,3 ]\n"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ds::ppl::parse_ids("4 5\n6\t7"), (std::vector<int32_t>{4, 5, 6, 7}));
  for (const char* bad : {"", "[]", "[1,,2]", "[1,2,]", "[1, 2", "1 -2", "1 x", "[1.5]", "99999999999"})
    EXPECT_THROW(ds::ppl::parse_ids(bad), PplError) << "'" << bad << "'";
}

}  // namespace
