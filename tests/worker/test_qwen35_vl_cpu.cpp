// Vision input on the CPU backend (issue 31): the tiny Qwen3.5-VL fixture with its mmproj as
// worker stages, prompts with images against the HF transformers float32 reference
// (reference/qwen35_vl.json), and the same prompts cut into chunks, over two stages, decoded on.
//
// Tolerances. Against HF: 1e-3 absolute on the logits (scale ~3), as for the text model
// (test_qwen35_reference.cpp): the Q8_0 weights are exactly dequantized and the tower's F16 ones
// exact in f32, so only f32 rounding (summation orders, libm, the chunked vs recurrent GDN forms)
// separates the two. Chunked / staged / batched vs one step: 1e-4 (the CPU kernels compute each
// row independently of the batch, so these come out bit-identical in practice; measured 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/image_patches.h"
#include "tests/worker/model_harness.h"
#include "tests/worker/vl_harness.h"
#include "worker/backend.h"

namespace ds::test {
namespace {

constexpr float kLogitTol = 1e-3f;
constexpr float kSplitTol = 1e-4f;
constexpr float kMinMargin = 2e-3f;  // greedy steps whose reference top-2 margin is below: not compared

TEST(VisionInputFixture, ImagesAreTheReferencePixels) {
  for (const VlImage& v : vl_images()) {
    EXPECT_EQ(image_patches(v.image), v.pixel_values) << v.image.width << "x" << v.image.height;
  }
}

TEST(VisionInputFixture, ConfigNamesTheImageToken) {
  EXPECT_EQ(vl_model().config.image_token_id, vl_image_token_id());
}

class VisionInputPrompt : public testing::TestWithParam<std::string> {};

TEST_P(VisionInputPrompt, LogitsMatchHfReference) {
  const VlPrompt& p = vl_prompt(GetParam());
  const auto m = load_vl_stage();
  const size_t V = vl_model().config.n_vocab;
  const std::vector<float> logits = vl_all_row_logits(*m, p, 1);
  ASSERT_EQ(logits.size(), size_t{p.n()} * V);
  const std::vector<float> last(logits.end() - static_cast<std::ptrdiff_t>(V), logits.end());
  const float last_err = max_abs_diff(last, p.last_logits);
  float topk_err = 0;
  for (size_t t = 0; t < p.n(); ++t) {
    for (size_t k = 0; k < p.topk_ids[t].size(); ++k) {
      topk_err = std::max(topk_err, std::abs(logits[t * V + p.topk_ids[t][k]] - p.topk_logits[t][k]));
    }
  }
  std::printf("%s: last-row logits max |delta| %.3g, every row's top-16 %.3g\n", p.name.c_str(), last_err, topk_err);
  EXPECT_LE(last_err, kLogitTol);
  EXPECT_LE(topk_err, kLogitTol);
}

// Decode steps after the prompt continue the image shift (HF: cache length + rope delta).
TEST_P(VisionInputPrompt, GreedyDecodeMatchesHf) {
  const VlPrompt& p = vl_prompt(GetParam());
  const auto m = load_vl_stage();
  std::vector<float> logits = run_vl_prompt(*m, p, 1);
  for (size_t i = 0; i < p.greedy_tokens.size(); ++i) {
    const int32_t next = vl_argmax(logits);
    if (p.greedy_margins[i] < kMinMargin) break;  // a near tie: f32 rounding may pick either
    ASSERT_EQ(next, p.greedy_tokens[i]) << "greedy step " << i;
    logits = vl_decode(*m, p, 1, p.n() + static_cast<uint32_t>(i), next);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixture, VisionInputPrompt,
                         testing::Values("one_image", "two_images", "resized_image", "text_only"));

TEST(VisionInput, TextOnlyStepsAreUnchangedByTheMmproj) {
  const VlPrompt& p = vl_prompt("text_only");
  const auto with = load_vl_stage();
  const auto without = load_vl_stage({0, 0}, false);
  const std::vector<float> a = vl_all_row_logits(*with, p, 1), b = vl_all_row_logits(*without, p, 1);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(VisionInput, ChunkBoundariesInsideImagesChangeNothing) {
  struct Case {
    const char* prompt;
    std::vector<uint32_t> cuts;
  };
  // one_image's image holds positions 4..67; two_images' 4..73 and 76..147.
  const Case cases[] = {{"one_image", {10, 40}},
                        {"one_image", {4, 5, 67, 68}},
                        {"two_images", {50, 100}},
                        {"two_images", {74, 76, 147}},
                        {"resized_image", {30}}};
  for (const Case& c : cases) {
    const VlPrompt& p = vl_prompt(c.prompt);
    const auto whole = load_vl_stage();
    const auto split = load_vl_stage();
    const std::vector<float> want = run_vl_prompt(*whole, p, 1);
    const float err = max_abs_diff(run_vl_prompt(*split, p, 1, c.cuts), want);
    std::printf("%s cut at %zu places: max |delta| vs one step %.3g\n", c.prompt, c.cuts.size(), err);
    EXPECT_LE(err, kSplitTol) << c.prompt;
  }
}

// Runs `p` over stage 0 (layers [0, 2), the embedder) and stage 1 ([2, 4), no mmproj), the hidden
// rows passed between them as the stage runner does; the last row's logits.
std::vector<float> run_two_stages(StageModel& s0, StageModel& s1, const VlPrompt& p, std::vector<uint32_t> cuts) {
  cuts.push_back(p.n());
  const size_t D = vl_model().config.n_embd;
  uint32_t begin = 0;
  StepOutput out0, out1;
  for (uint32_t end : cuts) {
    StepInput in0, in1;
    in0.seqs.push_back(vl_step(p, 1, begin, end));
    if (end == p.n()) in0.seqs[0].logit_rows = {end - begin - 1};
    add_pixels(in0.seqs[0], &in0);
    in1.seqs = in0.seqs;  // the later stage gets the spans (positions), not the pixels
    s0.forward(in0, &out0);
    const size_t T = end - begin;
    std::vector<float> rows(T * D);
    s0.backend().download(rows.data(), s0.output_rows(), T * D);
    s1.backend().upload(s1.input_rows(T), rows.data(), T * D);
    s1.forward(in1, &out1);
    begin = end;
  }
  return out1.logits;
}

TEST(VisionInput, TwoStagesEqualOne) {
  for (const char* name : {"one_image", "two_images"}) {
    const VlPrompt& p = vl_prompt(name);
    const auto whole = load_vl_stage();
    const auto s0 = load_vl_stage({0, 2});
    const auto s1 = load_vl_stage({2, 4}, false);
    const std::vector<float> want = run_vl_prompt(*whole, p, 1);
    const float err = max_abs_diff(run_two_stages(*s0, *s1, p, {40}), want);
    std::printf("%s over two stages: max |delta| vs one stage %.3g\n", name, err);
    EXPECT_LE(err, kSplitTol) << name;
  }
}

// The prompt's last token as a decode step, and a generated token after it, against the same
// rows computed in one prefill step; and without the images the decode step's positions would
// lose the shift, which the logits show (the test above would catch that bug).
TEST(VisionInput, DecodeStepsContinueTheImageShift) {
  const VlPrompt& p = vl_prompt("two_images");
  const auto m = load_vl_stage();
  const auto whole = load_vl_stage();
  const std::vector<float> want = run_vl_prompt(*whole, p, 1);
  VlPrompt head = p;
  head.ids.pop_back();
  run_vl_prompt(*m, head, 1);
  const std::vector<float> last = vl_decode(*m, p, 1, p.n() - 1, p.ids.back());
  const float err_last = max_abs_diff(last, want);
  EXPECT_LE(err_last, kSplitTol);

  const int32_t next = vl_argmax(last);
  const std::vector<float> step = vl_decode(*m, p, 1, p.n(), next);
  VlPrompt longer = p;
  longer.ids.push_back(next);
  const float err_next = max_abs_diff(step, run_vl_prompt(*whole, longer, 2));
  EXPECT_LE(err_next, kSplitTol);

  const auto unshifted = load_vl_stage();
  run_vl_prompt(*unshifted, p, 1);
  const float wrong = max_abs_diff(vl_decode(*unshifted, p, 1, p.n(), next, /*with_images=*/false), step);
  std::printf("decode: last prompt row %.3g, next token %.3g; positions without the shift: %.3g\n", err_last, err_next,
              wrong);
  EXPECT_GT(wrong, 100 * kLogitTol);
}

TEST(VisionInput, MixedBatchEqualsSoloRuns) {
  const VlPrompt& text = vl_prompt("text_only");
  const VlPrompt& image = vl_prompt("two_images");
  const auto batched = load_vl_stage();
  StepInput in;
  in.seqs.push_back(vl_step(text, 1, 0, text.n()));
  in.seqs.push_back(vl_step(image, 2, 0, image.n()));
  in.seqs[0].logit_rows = {text.n() - 1};
  in.seqs[1].logit_rows = {image.n() - 1};
  add_pixels(in.seqs[1], &in);
  StepOutput out;
  batched->forward(in, &out);
  const size_t V = vl_model().config.n_vocab;
  ASSERT_EQ(out.logits.size(), 2 * V);
  const auto solo = load_vl_stage();
  const std::vector<float> a(out.logits.begin(), out.logits.begin() + static_cast<std::ptrdiff_t>(V));
  const std::vector<float> b(out.logits.begin() + static_cast<std::ptrdiff_t>(V), out.logits.end());
  EXPECT_LE(max_abs_diff(a, run_vl_prompt(*solo, text, 1)), kSplitTol);
  EXPECT_LE(max_abs_diff(b, run_vl_prompt(*solo, image, 2)), kSplitTol);
}

// The MTP block's last draft row of a 20-token prompt on a last stage of the text fixture (which
// has an MTP block; the VL fixture has none), the step naming `images`: a stage after the first
// takes spans without pixels, its input rows are made up.
std::vector<float> mtp_last_row(const std::vector<ImageSpan>& images) {
  const uint32_t L = load_fixture().config.n_layer;
  const LoadedModel m = load_fixture(false, {1, L});
  const size_t D = m.config.n_embd, V = m.config.n_vocab, T = 20;
  std::vector<int32_t> ids(T);
  std::vector<float> rows(T * D);
  for (size_t i = 0; i < T; ++i) ids[i] = static_cast<int32_t>(100 + 7 * i);
  for (size_t i = 0; i < T * D; ++i) rows[i] = std::sin(0.37f * static_cast<float>(i));
  StepInput in;
  in.seqs.push_back({1, 0, ids, {T - 1}});
  in.seqs[0].images = images;
  m.stage->backend().upload(m.stage->input_rows(T), rows.data(), T * D);
  StepOutput out;
  m.stage->forward(in, &out);
  std::vector<float> logits;
  m.stage->forward_mtp(1, 0, ids, rows.data(), &logits);
  return std::vector<float>(logits.end() - static_cast<std::ptrdiff_t>(V), logits.end());
}

// MTP rows take the M-RoPE positions of the sequence's images (StageCache::Seq::images): a 3x4
// image moves them; a 1x1 image, whose positions equal the text ones, leaves them bit for bit.
TEST(VisionInput, MtpRowsTakeTheImagePositions) {
  const std::vector<float> text = mtp_last_row({});
  EXPECT_EQ(mtp_last_row({{3, 1, 1, 7}}), text);
  const float moved = max_abs_diff(mtp_last_row({{3, 3, 4, 7}}), text);
  std::printf("MTP last row with a 3x4 image vs none: %.3g\n", moved);
  EXPECT_GT(moved, 10 * kLogitTol);
}

}  // namespace
}  // namespace ds::test
