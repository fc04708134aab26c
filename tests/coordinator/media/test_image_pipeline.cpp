// The whole image path against the HF reference (tests/data/reference/qwen35_vl.json): each
// fixture image's data URL through load_image, then preprocess_image, against the pixel_values
// Qwen2VLImageProcessorFast produced for it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/image_patches.h"
#include "coordinator/media/image_source.h"
#include "tests/coordinator/media/vl_fixture.h"

namespace ds {
namespace {

using test::fixture_images;
using test::FixtureImage;

PreprocessedImage preprocess_fixture(const FixtureImage& f) {
  const test::FixtureProcessor p = test::fixture_processor();
  return preprocess_image(load_image(f.data_url), p.limits, p.layout);
}

// Qwen3.5's preprocessor_config.json (patch 16, temporal 2, merge 2, mean = std = 0.5, 65536 ..
// 16777216 pixels, rescale 1/255) is what ImageSizeLimits and PatchLayout default to.
TEST(ImagePipeline, DefaultsAreTheFixturePreprocessorConfig) {
  const test::FixtureProcessor p = test::fixture_processor();
  const ImageSizeLimits limits;
  const PatchLayout layout;
  EXPECT_EQ(p.limits.factor, limits.factor);
  EXPECT_EQ(p.limits.min_pixels, limits.min_pixels);
  EXPECT_EQ(p.limits.max_pixels, limits.max_pixels);
  EXPECT_EQ(p.layout.patch, layout.patch);
  EXPECT_EQ(p.layout.merge, layout.merge);
  EXPECT_EQ(p.layout.temporal, layout.temporal);
  EXPECT_EQ(p.layout.mean, layout.mean);
  EXPECT_EQ(p.layout.std, layout.std);
  EXPECT_EQ(p.rescale_factor, 1.0 / 255.0);
}

struct Difference {
  size_t mismatches = 0;
  float max_abs = 0;
};

Difference compare(const std::vector<float>& got, const std::vector<float>& want) {
  Difference d;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) ++d.mismatches;
    d.max_abs = std::max(d.max_abs, std::abs(got[i] - want[i]));
  }
  return d;
}

// One 8-bit level is 2/255 in normalized units ((x - 127.5) / 127.5).
constexpr float kLevel = 2.0f / 255.0f;

TEST(ImagePipeline, FixtureImagesDecodeToTheirSizeAndHfGrid) {
  ASSERT_EQ(fixture_images().size(), 4u);
  for (const FixtureImage& f : fixture_images()) {
    const RgbImage im = load_image(f.data_url);
    EXPECT_EQ(im.width, f.width);
    EXPECT_EQ(im.height, f.height);
    const PatchGrid grid = patch_grid(smart_resize(im.width, im.height));
    EXPECT_EQ(grid, f.grid) << f.width << "x" << f.height;
    EXPECT_EQ(image_token_count(grid), f.n_tokens);
    EXPECT_EQ(f.resized, !(smart_resize(im.width, im.height) == ImageSize{im.width, im.height}));
  }
}

// libpng is exact, the normalization is HF's fused float32 affine: not one bit may differ.
TEST(ImagePipeline, UnresizedPngMatchesHfBitForBit) {
  int checked = 0;
  for (const FixtureImage& f : fixture_images()) {
    if (f.format != "png" || f.resized) continue;
    const PreprocessedImage got = preprocess_fixture(f);
    ASSERT_EQ(got.pixel_values.size(), f.pixel_values.size());
    const Difference d = compare(got.pixel_values, f.pixel_values);
    EXPECT_EQ(d.mismatches, 0u) << f.width << "x" << f.height << ": max |diff| " << d.max_abs;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// PIL decodes JPEG with libjpeg-turbo's accurate integer IDCT and fancy upsampling, as we do;
// that IDCT is specified to the bit (its SIMD and C versions agree), so we hold it to exact.
TEST(ImagePipeline, UnresizedJpegMatchesHfBitForBit) {
  int checked = 0;
  for (const FixtureImage& f : fixture_images()) {
    if (f.format != "jpeg" || f.resized) continue;
    const PreprocessedImage got = preprocess_fixture(f);
    ASSERT_EQ(got.pixel_values.size(), f.pixel_values.size());
    const Difference d = compare(got.pixel_values, f.pixel_values);
    EXPECT_EQ(d.mismatches, 0u) << "max |diff| " << d.max_abs << " = " << d.max_abs / kLevel << " levels";
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

// resize_bicubic follows PyTorch's uint8 antialiased bicubic kernel (what torchvision runs for
// HF on the CPU) in its integer arithmetic, so it is held to exact too; a resampler that were
// merely PIL-like would be off by a level here and there.
TEST(ImagePipeline, ResizedPngMatchesHfBitForBit) {
  int checked = 0;
  for (const FixtureImage& f : fixture_images()) {
    if (!f.resized) continue;
    const PreprocessedImage got = preprocess_fixture(f);
    EXPECT_EQ(got.grid, f.grid);
    ASSERT_EQ(got.pixel_values.size(), f.pixel_values.size());
    const Difference d = compare(got.pixel_values, f.pixel_values);
    EXPECT_EQ(d.mismatches, 0u) << d.mismatches << " of " << got.pixel_values.size() << " differ, max |diff| "
                                << d.max_abs << " = " << d.max_abs / kLevel << " levels";
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

}  // namespace
}  // namespace ds
