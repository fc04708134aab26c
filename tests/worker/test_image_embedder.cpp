// The image embedder (worker/blocks/image_embedder.h) on its own: an image split over prefill
// chunks is encoded once, its rows land where its tokens are, the cache evicts least recently used;
// a step of many images gives the rows of one image per step within one image's workspace and the
// cache's limits; and a stage refuses bad vision input before any state changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
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
  // The step's embedded input as the embedder leaves it ([step rows][n_embd]; text rows stay 0).
  std::vector<float> run(const StepInput& in) {
    e.check(in);
    e.prepare(in);
    size_t n = 0;
    for (const SeqStep& s : in.seqs) n += s.n_tokens();
    const size_t floats = n * vl_model().config.n_embd;
    float* x = be->alloc(floats);
    e.write_rows(x);
    std::vector<float> rows(floats);
    be->download(rows.data(), x, floats);
    be->release(x);
    return rows;
  }
};

TEST(ImageEmbedder, EncodesAnImageOnceAcrossChunksAndPlacesItsRows) {
  const VlPrompt& p = vl_prompt("one_image");  // image at positions 4..67
  Embedder em;
  em.run(step_of(p, 1, 0, 10));
  EXPECT_EQ(em.e.n_encoded(), 1u);
  const std::vector<float> rows = em.run(step_of(p, 1, 10, 40));
  EXPECT_EQ(em.e.n_encoded(), 1u);  // the cached encoding

  // Rows 0..29 of the second step are image tokens 6..35.
  const size_t D = vl_model().config.n_embd, T = 30;
  const std::vector<float>& ref = load_vision_reference_images()[0].vision_embeds;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < T * D; ++i) {
    diff = std::max(diff, std::abs(double{rows[i]} - ref[6 * D + i]));
    scale = std::max(scale, std::abs(double{ref[6 * D + i]}));
  }
  EXPECT_LE(diff / scale, kEmbedRelTol);
}

TEST(ImageEmbedder, EvictsTheLeastRecentlyUsed) {
  const VlPrompt& one = vl_prompt("one_image");
  const VlPrompt& two = vl_prompt("two_images");  // images at positions 4..73 and 76..147
  Embedder em(ImageCacheLimits{1, size_t{1} << 30});
  em.run(step_of(two, 1, 0, two.n()));  // both images in one step: each placed as made, the later kept
  EXPECT_EQ(em.e.n_encoded(), 2u);
  EXPECT_EQ(em.e.n_cached(), 1u);
  em.run(step_of(two, 1, 100, two.n()));  // the second image: cached
  EXPECT_EQ(em.e.n_encoded(), 2u);
  em.run(step_of(one, 2, 0, one.n()));  // a third image: the older one goes
  EXPECT_EQ(em.e.n_encoded(), 3u);
  EXPECT_EQ(em.e.n_cached(), 1u);
  em.run(step_of(one, 2, 30, one.n()));  // still cached
  EXPECT_EQ(em.e.n_encoded(), 3u);
  em.run(step_of(two, 1, 100, two.n()));  // two_images' second image again: encoded anew
  EXPECT_EQ(em.e.n_encoded(), 4u);
}

// ---- several images in one step ------------------------------------------------------------------

// A step of seven sequences: six of the fixture's prompts bringing eight distinct images (each
// image's hash salted per sequence), and a seventh repeating the first one's image.
struct ManyImages {
  StepInput step;
  std::vector<size_t> offsets;  // each sequence's first row in the step
};

ManyImages many_images_step() {
  const char* names[] = {"one_image", "two_images", "resized_image", "two_images", "one_image", "resized_image"};
  ManyImages m;
  size_t offset = 0;
  for (uint64_t i = 0; i <= std::size(names); ++i) {
    const VlPrompt& p = vl_prompt(names[i % std::size(names)]);
    SeqStep s = vl_step(p, i + 1, 0, p.n());
    for (size_t k = 0; k < s.images.size(); ++k) {
      ImageSpan& im = s.images[k];
      im.hash ^= (i % std::size(names)) << 40;  // the last sequence: the first one's hash
      const bool have = std::any_of(m.step.images.begin(), m.step.images.end(),
                                    [&](const StepImage& x) { return x.hash == im.hash; });
      if (!have) m.step.images.push_back({im.hash, vl_images()[p.span_image[k]].image});
    }
    m.offsets.push_back(offset);
    offset += s.n_tokens();
    m.step.seqs.push_back(std::move(s));
  }
  return m;
}

// One image alone in a step: exactly its rows, as a step of one prompt chunk would bring it.
StepInput one_image_step(const StepInput& many, const SeqStep& s, const ImageSpan& im) {
  StepInput in;
  SeqStep one;
  one.seq_id = s.seq_id;
  one.start_pos = im.first_pos;
  one.token_ids.assign(s.token_ids.begin() + im.first_pos, s.token_ids.begin() + im.end_pos());
  one.images = {im};
  in.seqs.push_back(std::move(one));
  for (const StepImage& p : many.images) {
    if (p.hash == im.hash) in.images.push_back(p);
  }
  return in;
}

// Each image's rows of the many-image step against the same image alone in a step (one tower call
// per image either way, so bit for bit), and its tower calls within one image's workspace
// (VisionTower::workspace_floats, what worker/cache/tower_sizing.h sets aside for the largest);
// `kept` encodings remain cached.
void expect_one_image_per_step_rows(ImageCacheLimits limits, size_t kept) {
  const ManyImages m = many_images_step();
  ASSERT_EQ(m.step.images.size(), 8u);
  const size_t D = vl_model().config.n_embd;
  Embedder many(limits), alone;
  const std::vector<float> rows = many.run(m.step);
  EXPECT_EQ(many.e.n_encoded(), 8u) << "the repeated image is encoded once";
  const VisionConfig& v = many.e.vision();
  size_t most_patches = 0, all_patches = 0, most_bytes = 0;
  for (size_t i = 0; i < m.step.seqs.size(); ++i) {
    for (const ImageSpan& im : m.step.seqs[i].images) {
      const std::vector<float> want = alone.run(one_image_step(m.step, m.step.seqs[i], im));
      const auto first = rows.begin() + static_cast<ptrdiff_t>((m.offsets[i] + im.first_pos) * D);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), first)) << "sequence " << i << ", image at " << im.first_pos;
      const size_t patches = size_t{im.n_tokens()} * v.patches_per_token();
      most_patches = std::max(most_patches, patches);
      all_patches += patches;
      most_bytes = std::max(most_bytes, size_t{im.n_tokens()} * D * sizeof(float));
    }
  }
  EXPECT_EQ(many.e.peak_workspace_floats(), VisionTower::workspace_floats(v, most_patches));
  EXPECT_LT(many.e.peak_workspace_floats(), VisionTower::workspace_floats(v, all_patches));
  EXPECT_EQ(alone.e.peak_workspace_floats(), many.e.peak_workspace_floats());
  EXPECT_EQ(many.e.n_cached(), kept);
  EXPECT_LE(many.e.n_cached(), limits.max_images);
  EXPECT_LE(many.e.peak_encoding_bytes(), std::min(limits.max_bytes, limits.max_images * most_bytes) + most_bytes);
}

TEST(ImageEmbedder, ManyImagesInAStepGiveTheRowsOfOneImagePerStep) {
  expect_one_image_per_step_rows({}, 8);
}

// The cache holds two of the eight (any two of 64 to 72 tokens fit its bytes, no three), then three:
// the step's new encodings are placed as they are made and evicted like any other, so the step
// never holds more than the cache and the one being encoded.
TEST(ImageEmbedder, ManyImagesInAStepKeepTheCacheWithinItsLimits) {
  const size_t largest = 72 * vl_model().config.n_embd * sizeof(float);  // image 3, 8x9 tokens
  expect_one_image_per_step_rows({16, 2 * largest}, 2);
  expect_one_image_per_step_rows({3, size_t{1} << 30}, 3);
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
