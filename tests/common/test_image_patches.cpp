// The HF image processor's size rule, resampler and patch layout (common/image_patches.h). The
// fixture images themselves are checked end to end in tests/coordinator/media.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/image_patches.h"

namespace ds {
namespace {

RgbImage random_image(uint32_t width, uint32_t height, uint32_t seed) {
  std::mt19937 rng(seed);
  RgbImage im{width, height, std::vector<uint8_t>(size_t{width} * height * 3)};
  for (uint8_t& v : im.rgb) v = static_cast<uint8_t>(rng());
  return im;
}

struct ResizeCase {
  uint32_t width, height;
  ImageSize expected;
};

// Expected values from HF's smart_resize (Python, factor 32, min 65536, max 16777216).
TEST(SmartResize, MatchesHfOnComputedCases) {
  const ResizeCase cases[] = {
      {256, 256, {256, 256}},     {320, 224, {320, 224}},       {288, 256, {288, 256}},     {640, 480, {640, 480}},
      {200, 150, {320, 224}},     {10, 10, {256, 256}},         {1, 1, {256, 256}},         {33, 2000, {64, 2016}},
      {3, 600, {32, 3648}},       {1920, 1080, {1920, 1088}},   {4096, 4096, {4096, 4096}}, {4097, 4096, {4096, 4096}},
      {5000, 4000, {4576, 3648}}, {16384, 16384, {4096, 4096}}, {20000, 100, {20000, 96}},  {100, 20000, {96, 20000}},
      {7000, 35, {7008, 32}},
  };
  for (const ResizeCase& c : cases) {
    EXPECT_EQ(smart_resize(c.width, c.height), c.expected) << c.width << "x" << c.height;
  }
}

// Python's round() sends x.5 to the even neighbour: 1.5 -> 2, 2.5 -> 2, 3.5 -> 4, 4.5 -> 4 (a
// half-up rounding would give 96 for 80 and 160 for 144). The 1024 height keeps the area at or
// above min_pixels, so the rounding alone decides.
TEST(SmartResize, RoundsTiesToEvenAsPythonDoes) {
  EXPECT_EQ(smart_resize(48, 1024), (ImageSize{64, 1024}));
  EXPECT_EQ(smart_resize(80, 1024), (ImageSize{64, 1024}));
  EXPECT_EQ(smart_resize(112, 1024), (ImageSize{128, 1024}));
  EXPECT_EQ(smart_resize(144, 1024), (ImageSize{128, 1024}));
}

// HF's Python with factor 32, min 1024, max 4096: 400x40 rounds to 416x32, over the maximum, so
// both sides shrink by sqrt(16000 / 4096) and floor; the height floors to 0 and is kept at 32.
TEST(SmartResize, ShrinksPastMaxPixelsButKeepsOneFactor) {
  EXPECT_EQ(smart_resize(400, 40, {32, 1024, 4096}), (ImageSize{192, 32}));
  // Qwen2-VL's defaults (factor 28, 56*56 .. 28*28*1280), also from HF's Python.
  EXPECT_EQ(smart_resize(1920, 1080, {28, 3136, 1003520}), (ImageSize{1316, 728}));
  EXPECT_EQ(smart_resize(1000, 1000, {28, 3136, 1003520}), (ImageSize{980, 980}));
}

TEST(SmartResize, RefusesAspectRatioOver200AndEmptyImages) {
  EXPECT_NO_THROW(smart_resize(200, 1));
  try {
    smart_resize(201, 1);
    FAIL() << "an aspect ratio of 201 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("aspect ratio"), std::string::npos) << e.what();
  }
  EXPECT_THROW(smart_resize(0, 100), std::invalid_argument);
  EXPECT_THROW(smart_resize(100, 0), std::invalid_argument);
  EXPECT_THROW(smart_resize(100, 100, {0, 1, 2}), std::invalid_argument);
}

TEST(ImageTokenCount, IsMergedGridArea) {
  EXPECT_EQ(image_token_count({1, 16, 16}), 64u);
  EXPECT_EQ(image_token_count({1, 14, 20}), 70u);
  EXPECT_EQ(image_token_count({1, 16, 18}), 72u);
  EXPECT_THROW(image_token_count({1, 15, 18}), std::invalid_argument);
  EXPECT_EQ(patch_grid({320, 224}), (PatchGrid{1, 14, 20}));
  EXPECT_THROW(patch_grid({320, 208}), std::invalid_argument);
}

// HF's flatten, done independently: the frames stacked [T][C][H][W], viewed as
// (1, T, C, gh/m, m, P, gw/m, m, P), permuted by (0, 3, 6, 4, 7, 2, 1, 5, 8) and read in order.
std::vector<float> hf_flatten(const std::vector<float>& chw, uint32_t height, uint32_t width, const PatchLayout& l) {
  const uint32_t P = l.patch, m = l.merge, T = l.temporal;
  const uint32_t in_shape[9] = {1, T, 3, height / P / m, m, P, width / P / m, m, P};
  const int perm[9] = {0, 3, 6, 4, 7, 2, 1, 5, 8};
  uint64_t in_stride[9];
  in_stride[8] = 1;
  for (int d = 7; d >= 0; --d) in_stride[d] = in_stride[d + 1] * in_shape[d + 1];
  std::vector<float> frames;  // T copies of the CHW image
  for (uint32_t t = 0; t < T; ++t) frames.insert(frames.end(), chw.begin(), chw.end());
  std::vector<float> out(frames.size());
  uint32_t idx[9] = {};  // output multi-index over the permuted shape
  for (size_t o = 0; o < out.size(); ++o) {
    uint64_t in = 0;
    for (int d = 0; d < 9; ++d) in += idx[d] * in_stride[perm[d]];
    out[o] = frames[in];
    for (int d = 8; d >= 0; --d) {
      if (++idx[d] < in_shape[perm[d]]) break;
      idx[d] = 0;
    }
  }
  return out;
}

TEST(ImagePatches, RowsFollowHfPermutation) {
  PatchLayout layout;
  layout.mean = {0.48145466f, 0.4578275f, 0.40821073f};  // CLIP's, so the channels differ
  layout.std = {0.26862954f, 0.26130258f, 0.27577711f};
  const RgbImage im = random_image(96, 64, 7);
  std::vector<float> chw(size_t{3} * im.width * im.height);
  for (uint32_t c = 0; c < 3; ++c) {
    for (uint32_t y = 0; y < im.height; ++y) {
      for (uint32_t x = 0; x < im.width; ++x) {
        const float v = im.rgb[(size_t{y} * im.width + x) * 3 + c];
        chw[(size_t{c} * im.height + y) * im.width + x] = (v - layout.mean[c] * 255.0f) / (layout.std[c] * 255.0f);
      }
    }
  }
  const std::vector<float> expected = hf_flatten(chw, im.height, im.width, layout);
  const std::vector<float> got = image_patches(im, layout);
  ASSERT_EQ(got.size(), size_t{6 * 4} * layout.row_size());
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);
}

// The fused form HF's fast processor computes, (x - 127.5) / 127.5 in float32, is not the
// two-step x * (1/255) then (x - 0.5) / 0.5 bit for bit; the fixture test holds us to HF's.
TEST(ImagePatches, NormalizesWithHfFusedRescale) {
  RgbImage im{32, 32, std::vector<uint8_t>(32 * 32 * 3)};
  for (size_t i = 0; i < im.rgb.size(); ++i) im.rgb[i] = static_cast<uint8_t>(i % 256);
  const std::vector<float> got = image_patches(im);
  for (size_t row = 0; row < 4; ++row) {
    for (uint32_t c = 0; c < 3; ++c) {
      for (uint32_t py = 0; py < 16; ++py) {
        for (uint32_t px = 0; px < 16; ++px) {
          const uint32_t y = (row / 2) * 16 + py, x = (row % 2) * 16 + px;
          const float level = im.rgb[(size_t{y} * 32 + x) * 3 + c];
          const float want = (level - 127.5f) / 127.5f;
          for (uint32_t t = 0; t < 2; ++t) {
            ASSERT_EQ(got[row * 1536 + ((c * 2 + t) * 16 + py) * 16 + px], want) << row << " " << c << " " << t;
          }
        }
      }
    }
  }
}

TEST(ImagePatches, RefusesSidesThatAreNotWholeMergeBlocks) {
  EXPECT_THROW(image_patches(random_image(48, 32, 1)), std::invalid_argument);
  EXPECT_THROW(image_patches(RgbImage{32, 32, std::vector<uint8_t>(10)}), std::invalid_argument);
  EXPECT_THROW(preprocess_image(random_image(32, 32, 1), {28, 1, 1000000}), std::invalid_argument);
}

// An independent reference for resize_bicubic: PIL's separable filter in double precision,
// rounded to 8 bits after each pass.
std::vector<double> pil_weights(uint32_t in, uint32_t out, uint32_t i, int64_t& first) {
  const double scale = double(in) / out, fs = std::max(scale, 1.0), support = 2.0 * fs, center = (i + 0.5) * scale;
  first = std::max<int64_t>(int64_t(center - support + 0.5), 0);
  const int64_t last = std::min<int64_t>(int64_t(center + support + 0.5), in);
  std::vector<double> w;
  double sum = 0;
  for (int64_t x = first; x < last; ++x) {
    const double t = std::abs((x - center + 0.5) / fs);
    const double k = t < 1 ? (1.5 * t - 2.5) * t * t + 1 : t < 2 ? ((-0.5 * t + 2.5) * t - 4) * t + 2 : 0;
    w.push_back(k);
    sum += k;
  }
  for (double& k : w) k /= sum;
  return w;
}

uint8_t clamp_round(double v) {
  return static_cast<uint8_t>(std::clamp(std::floor(v + 0.5), 0.0, 255.0));
}

RgbImage reference_resize(const RgbImage& src, uint32_t width, uint32_t height) {
  RgbImage mid{width, src.height, std::vector<uint8_t>(size_t{width} * src.height * 3)};
  for (uint32_t x = 0; x < width; ++x) {
    int64_t first = 0;
    const std::vector<double> w = pil_weights(src.width, width, x, first);
    for (uint32_t y = 0; y < src.height; ++y) {
      for (int c = 0; c < 3; ++c) {
        double acc = 0;
        for (size_t j = 0; j < w.size(); ++j) acc += w[j] * src.rgb[(size_t{y} * src.width + first + j) * 3 + c];
        mid.rgb[(size_t{y} * width + x) * 3 + c] = clamp_round(acc);
      }
    }
  }
  RgbImage out{width, height, std::vector<uint8_t>(size_t{width} * height * 3)};
  for (uint32_t y = 0; y < height; ++y) {
    int64_t first = 0;
    const std::vector<double> w = pil_weights(src.height, height, y, first);
    for (size_t k = 0; k < size_t{width} * 3; ++k) {
      double acc = 0;
      for (size_t j = 0; j < w.size(); ++j) acc += w[j] * mid.rgb[(first + j) * width * 3 + k];
      out.rgb[size_t{y} * width * 3 + k] = clamp_round(acc);
    }
  }
  return out;
}

// The int16 weights carry ~14 bits, so a sample can land one level from the exact double filter
// when the exact value sits near a rounding boundary; never further.
TEST(ResizeBicubic, StaysWithinOneLevelOfTheDoubleFilter) {
  const struct {
    uint32_t w, h, ow, oh;
  } cases[] = {{200, 150, 320, 224}, {97, 61, 19, 33}, {64, 64, 256, 17}, {300, 20, 32, 64}, {33, 7, 1, 1}};
  for (const auto& c : cases) {
    const RgbImage src = random_image(c.w, c.h, c.w * 31 + c.h);
    const RgbImage got = resize_bicubic(src, c.ow, c.oh);
    const RgbImage want = reference_resize(src, c.ow, c.oh);
    ASSERT_EQ(got.rgb.size(), want.rgb.size());
    int worst = 0;
    for (size_t i = 0; i < got.rgb.size(); ++i) worst = std::max(worst, std::abs(int(got.rgb[i]) - int(want.rgb[i])));
    EXPECT_LE(worst, 1) << c.w << "x" << c.h << " -> " << c.ow << "x" << c.oh;
  }
}

TEST(ResizeBicubic, KeepsFlatImagesFlatAndSameSizeUnchanged) {
  RgbImage flat{50, 40, std::vector<uint8_t>(50 * 40 * 3)};
  for (size_t i = 0; i < flat.rgb.size(); ++i) flat.rgb[i] = std::array<uint8_t, 3>{0, 128, 255}[i % 3];
  for (const auto& [w, h] : {std::pair{13u, 7u}, std::pair{320u, 224u}, std::pair{50u, 200u}}) {
    const RgbImage out = resize_bicubic(flat, w, h);
    for (size_t i = 0; i < out.rgb.size(); ++i) ASSERT_EQ(out.rgb[i], flat.rgb[i % 3]) << w << "x" << h;
  }
  const RgbImage src = random_image(40, 30, 3);
  EXPECT_EQ(resize_bicubic(src, 40, 30).rgb, src.rgb);
  // Only the width changes: every column pass is skipped, so each row resamples on its own.
  const RgbImage wide = resize_bicubic(src, 80, 30);
  const RgbImage row0 = resize_bicubic(RgbImage{40, 1, {src.rgb.begin(), src.rgb.begin() + 120}}, 80, 1);
  EXPECT_TRUE(std::equal(row0.rgb.begin(), row0.rgb.end(), wide.rgb.begin()));
  EXPECT_THROW(resize_bicubic(src, 0, 10), std::invalid_argument);
  EXPECT_THROW(resize_bicubic(RgbImage{}, 10, 10), std::invalid_argument);
}

}  // namespace
}  // namespace ds
