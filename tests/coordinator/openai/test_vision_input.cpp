// Image parts to image tokens (issue 31): the fixture's images loaded from their data URLs,
// resized as HF's processor does, and the template's one pad per image expanded to exactly the
// reference's prompt ids; the limits answer 400s naming what was exceeded.
#include <gtest/gtest.h>

#include "coordinator/http/api_error.h"
#include "coordinator/openai/vision_input.h"
#include "tests/testutil/vision_reference.h"

namespace ds::openai {
namespace {

constexpr int32_t kPad = 151655;  // the fixture's <|image_pad|>

VisionOptions vision() {
  VisionOptions v;
  v.enabled = true;
  v.image_token_id = kPad;
  return v;
}

// The ids the chat template renders: each image's run of pads collapsed to one pad.
std::vector<int32_t> collapsed(const std::vector<int32_t>& ids) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == kPad && i > 0 && ids[i - 1] == kPad) continue;
    out.push_back(ids[i]);
  }
  return out;
}

std::string api_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  return "(no error)";
}

TEST(VisionInput, ExpandedPadsEqualTheReferencePromptIds) {
  for (const char* name : {"one_image", "two_images", "resized_image"}) {
    const test::VisionReferencePrompt ref = test::load_vision_reference_prompt(name);
    const std::vector<PreparedImage> images = prepare_images(ref.image_urls, vision());
    std::vector<PromptImage> spans;
    EXPECT_EQ(expand_image_pads(collapsed(ref.ids), images, kPad, &spans), ref.ids) << name;
    ASSERT_EQ(spans.size(), ref.image_urls.size());
    for (size_t k = 0; k < spans.size(); ++k) {
      const ImageSpan& s = spans[k].span;
      for (uint32_t p = s.first_pos; p < s.end_pos(); ++p) EXPECT_EQ(ref.ids[p], kPad);
      EXPECT_NE(ref.ids[s.first_pos - 1], kPad);
      EXPECT_EQ(spans[k].pixels->width, s.grid_w * 32);
      EXPECT_EQ(s.hash, image_content_hash(*spans[k].pixels));
    }
  }
}

TEST(VisionInput, TheResizedImageTakesHfSize) {
  // 200x150 is below 65536 pixels: smart_resize scales it up to 320x224 (14x20 patches).
  const test::VisionReferencePrompt ref = test::load_vision_reference_prompt("resized_image");
  const PreparedImage im = prepare_images(ref.image_urls, vision()).at(0);
  EXPECT_EQ(im.pixels->width, 320u);
  EXPECT_EQ(im.pixels->height, 224u);
  EXPECT_EQ(im.n_tokens(), 70u);
}

TEST(VisionInput, HashesDifferForOtherPixels) {
  RgbImage a{32, 32, std::vector<uint8_t>(32 * 32 * 3, 5)}, b = a, c{16, 64, a.rgb};
  EXPECT_EQ(image_content_hash(a), image_content_hash(b));
  b.rgb[100] ^= 1;
  EXPECT_NE(image_content_hash(a), image_content_hash(b));
  EXPECT_NE(image_content_hash(a), image_content_hash(c));  // same bytes, other size
}

TEST(VisionInput, LimitsAndErrorsName) {
  const test::VisionReferencePrompt ref = test::load_vision_reference_prompt("one_image");
  VisionOptions off;
  EXPECT_NE(api_error_of([&] { prepare_images(ref.image_urls, off); }).find("--mmproj"), std::string::npos);
  VisionOptions two = vision();
  two.max_images_per_request = 2;
  const std::vector<std::string> three(3, ref.image_urls[0]);
  EXPECT_NE(api_error_of([&] { prepare_images(three, two); }).find("--max-images-per-request"), std::string::npos);
  EXPECT_NE(api_error_of([&] { prepare_images({"data:image/png;base64,AAAA"}, vision()); }).find("image 1"),
            std::string::npos);
  const std::vector<PreparedImage> one = prepare_images(ref.image_urls, vision());
  std::vector<PromptImage> spans;
  EXPECT_NE(api_error_of([&] {
              expand_image_pads({1, 2, 3}, one, kPad, &spans);
            }).find("placeholders"),
            std::string::npos);
}

TEST(VisionInput, TokenBoundsScaleTheImage) {
  const test::VisionReferencePrompt ref = test::load_vision_reference_prompt("one_image");  // 256x256: 64 tokens
  VisionOptions v = vision();
  v.image_max_tokens = 16;
  EXPECT_LE(prepare_images(ref.image_urls, v).at(0).n_tokens(), 16u);
  v = vision();
  v.image_min_tokens = 256;
  EXPECT_GE(prepare_images(ref.image_urls, v).at(0).n_tokens(), 256u);
}

}  // namespace
}  // namespace ds::openai
