// The image embedder (worker/blocks/image_embedder.h) on its own: an image split over prefill
// chunks is encoded once, its rows land where its tokens are, the cache evicts least recently used;
// and a stage refuses bad vision input before any state changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "tests/testutil/expect_config_error.h"
#include "tests/testutil/vision_reference.h"
#include "tests/worker/vl_harness.h"
#include "worker/backend.h"
#include "worker/blocks/image_embedder.h"

namespace ds::test {
namespace {

constexpr float kSplitTol = 1e-4f;
constexpr double kEmbedRelTol = 1e-5;  // the tower vs HF (test_qwen35_vision.cpp says why)

StepInput step_of(const VlPrompt& p, uint64_t seq, uint32_t begin, uint32_t end) {
  StepInput in;
  in.seqs.push_back(vl_step(p, seq, begin, end));
  add_pixels(in.seqs[0], &in);
  return in;
}

struct Embedder {
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  ImageEmbedder e;
  explicit Embedder(ImageCacheLimits limits = {}) : e(vl_model().mmproj, *be, vl_model().config, limits) {}
  void run(const StepInput& in) {
    e.check(in);
    e.prepare(in);
  }
};

TEST(ImageEmbedder, EncodesAnImageOnceAcrossChunksAndPlacesItsRows) {
  const VlPrompt& p = vl_prompt("one_image");  // image at positions 4..67
  Embedder em;
  em.run(step_of(p, 1, 0, 10));
  EXPECT_EQ(em.e.n_encoded(), 1u);
  const StepInput second = step_of(p, 1, 10, 40);
  em.run(second);
  EXPECT_EQ(em.e.n_encoded(), 1u);  // the cached encoding

  // Rows 0..29 of the second step are image tokens 6..35.
  const size_t D = vl_model().config.n_embd, T = 30;
  float* x = em.be->alloc(T * D);
  em.e.write_rows(x);
  std::vector<float> rows(T * D);
  em.be->download(rows.data(), x, T * D);
  em.be->release(x);
  const std::vector<float>& ref = load_vision_reference_images()[0].vision_embeds;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < T * D; ++i) {
    diff = std::max(diff, std::abs(double{rows[i]} - ref[6 * D + i]));
    scale = std::max(scale, std::abs(double{ref[6 * D + i]}));
  }
  EXPECT_LE(diff / scale, kEmbedRelTol);
}

TEST(ImageEmbedder, EvictsTheLeastRecentlyUsedButNotTheStepsOwn) {
  const VlPrompt& one = vl_prompt("one_image");
  const VlPrompt& two = vl_prompt("two_images");
  Embedder em(ImageCacheLimits{1, size_t{1} << 30});
  em.run(step_of(two, 1, 0, two.n()));  // both images in one step: both kept while it runs
  EXPECT_EQ(em.e.n_encoded(), 2u);
  EXPECT_EQ(em.e.n_cached(), 2u);
  em.run(step_of(one, 2, 0, one.n()));  // a third image: the two older ones go
  EXPECT_EQ(em.e.n_encoded(), 3u);
  EXPECT_EQ(em.e.n_cached(), 1u);
  em.run(step_of(one, 2, 30, one.n()));  // still cached
  EXPECT_EQ(em.e.n_encoded(), 3u);
  em.run(step_of(two, 1, 100, two.n()));  // two_images' second image again: encoded anew
  EXPECT_EQ(em.e.n_encoded(), 4u);
}

// ---- bad input, through a stage ------------------------------------------------------------------

TEST(VisionInputErrors, RejectsMissingPixels) {
  const auto m = load_vl_stage();
  StepInput in = step_of(vl_prompt("one_image"), 1, 0, 20);
  in.images.clear();
  expect_config_error([&] { m->forward(in, nullptr); }, "no pixels");
}

TEST(VisionInputErrors, RejectsPixelsOfAnotherGrid) {
  const auto m = load_vl_stage();
  StepInput in = step_of(vl_prompt("one_image"), 1, 0, 20);
  in.images[0].image = vl_images()[1].image;  // 320x224: a 7x10 grid, the span says 8x8
  expect_config_error([&] { m->forward(in, nullptr); }, "token grid");
  in.images[0].image = RgbImage{40, 32, std::vector<uint8_t>(40 * 32 * 3)};
  expect_config_error([&] { m->forward(in, nullptr); }, "merge blocks");
  in.images[0].image.rgb.pop_back();
  expect_config_error([&] { m->forward(in, nullptr); }, "bytes of RGB");
}

TEST(VisionInputErrors, RejectsAnImagePositionWithoutTheImageToken) {
  const auto m = load_vl_stage();
  StepInput in = step_of(vl_prompt("one_image"), 1, 0, 20);
  in.seqs[0].token_ids[10] = 872;
  expect_config_error([&] { m->forward(in, nullptr); }, "not the image token");
}

TEST(VisionInputErrors, RejectsMalformedSpans) {
  const auto m = load_vl_stage();
  StepInput in = step_of(vl_prompt("two_images"), 1, 0, 159);
  in.seqs[0].images[1].first_pos = 60;  // overlaps the first image
  expect_config_error([&] { m->forward(in, nullptr); }, "overlapping");
}

TEST(VisionInputErrors, AStageThatCannotEmbedRefusesImages) {
  const VlPrompt& p = vl_prompt("one_image");
  const auto no_mmproj = load_vl_stage({0, 0}, false);
  expect_config_error([&] { no_mmproj->forward(step_of(p, 1, 0, 20), nullptr); }, "no --mmproj");
  StepInput no_pixels = step_of(p, 1, 0, 20);
  no_pixels.images.clear();
  expect_config_error([&] { no_mmproj->forward(no_pixels, nullptr); }, "no --mmproj");
  const auto later = load_vl_stage({2, 4}, true);
  expect_config_error([&] { later->forward(step_of(p, 1, 0, 20), nullptr); }, "after the first");
}

// A failing step leaves the other sequences' state as it was: seq 1's prompt continues after it
// exactly as without the failure.
TEST(VisionInputErrors, AFailedStepLeavesOtherSequencesUntouched) {
  const VlPrompt& p = vl_prompt("one_image");
  const VlPrompt& q = vl_prompt("two_images");
  const auto m = load_vl_stage();
  const std::vector<float> want = run_vl_prompt(*load_vl_stage(), p, 1);
  StepOutput out;
  m->forward(step_of(p, 1, 0, 10), &out);
  StepInput bad = step_of(p, 1, 10, p.n());
  bad.seqs[0].logit_rows = {p.n() - 11};
  bad.seqs.push_back(vl_step(q, 2, 0, 100));  // its pixels are missing
  expect_config_error([&] { m->forward(bad, &out); }, "no pixels");
  bad.seqs.pop_back();
  m->forward(bad, &out);
  EXPECT_LE(max_abs_diff(out.logits, want), kSplitTol);
}

}  // namespace
}  // namespace ds::test
