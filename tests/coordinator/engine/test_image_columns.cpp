// The plan's vision columns (issue 31): what encode_plan writes, the worker's stage reads back
// (validate_images, apply_image_columns) exactly, and malformed columns are refused, never crash.
#include <gtest/gtest.h>

#include <memory>

#include "common/error.h"
#include "coordinator/engine/step_codec.h"
#include "worker/daemon/stage_images.h"

namespace ds {
namespace {
namespace v1 = ipc::v1;

std::shared_ptr<const RgbImage> image(uint32_t w, uint32_t h, uint8_t fill) {
  auto im = std::make_shared<RgbImage>();
  im->width = w;
  im->height = h;
  im->rgb.assign(size_t{w} * h * 3, fill);
  return im;
}

SeqRequest row(uint64_t id, uint32_t start, uint32_t n) {
  SeqRequest s;
  s.seq_id = id;
  s.start_pos = start;
  s.tokens.assign(n, 7);
  return s;
}

StepInput decoded(const v1::StepPlan& plan, bool first_stage) {
  validate_images(plan);
  StepInput in;
  in.seqs.resize(static_cast<size_t>(plan.seq_ids_size()));
  apply_image_columns(plan, first_stage, &in);
  return in;
}

bool same(const ImageSpan& a, const ImageSpan& b) {
  return a.first_pos == b.first_pos && a.grid_h == b.grid_h && a.grid_w == b.grid_w && a.hash == b.hash;
}

TEST(ImageColumns, SpansAndPixelsRoundTrip) {
  const auto a = image(64, 32, 1), b = image(32, 32, 2);
  SeqRequest first = row(1, 0, 20);  // two images, both with rows in this chunk
  first.images = {{2, 1, 2, 0xa}, {5, 1, 1, 0xb}};
  first.image_pixels = {{0xa, a}, {0xb, b}};
  SeqRequest text = row(2, 3, 1);     // a text-only row in the same plan
  SeqRequest decode = row(3, 40, 1);  // a decode row: spans, no pixels
  decode.images = {{2, 1, 2, 0xa}};
  SeqRequest same_image = row(4, 0, 8);  // the same image again: its pixels travel once
  same_image.images = {{1, 1, 2, 0xa}};
  same_image.image_pixels = {{0xa, a}};
  SentSamplingMap sent;
  const v1::StepPlan plan = encode_plan({first, text, decode, same_image}, 1, 1, &sent);
  ASSERT_EQ(plan.image_pixels_size(), 2);
  const StepInput in = decoded(plan, true);
  ASSERT_EQ(in.seqs[0].images.size(), 2u);
  EXPECT_TRUE(same(in.seqs[0].images[0], first.images[0]));
  EXPECT_TRUE(same(in.seqs[0].images[1], first.images[1]));
  EXPECT_TRUE(in.seqs[1].images.empty());
  ASSERT_EQ(in.seqs[2].images.size(), 1u);
  EXPECT_TRUE(same(in.seqs[2].images[0], decode.images[0]));
  ASSERT_EQ(in.images.size(), 2u);
  EXPECT_EQ(in.images[0].hash, 0xau);
  EXPECT_EQ(in.images[0].image.width, 64u);
  EXPECT_EQ(in.images[0].image.rgb, a->rgb);
  EXPECT_EQ(in.images[1].image.rgb, b->rgb);
  EXPECT_TRUE(decoded(plan, false).images.empty());  // later stages take the spans only
}

TEST(ImageColumns, TextOnlyPlansCarryNoColumns) {
  SentSamplingMap sent;
  const v1::StepPlan plan = encode_plan({row(1, 0, 4)}, 1, 1, &sent);
  EXPECT_EQ(plan.n_images_size(), 0);
  EXPECT_EQ(plan.image_pixels_size(), 0);
  EXPECT_NO_THROW(validate_images(plan));
}

TEST(ImageColumns, EncoderRefusesBadSpans) {
  SeqRequest s = row(1, 0, 8);
  s.images = {{4, 1, 2, 1}, {2, 1, 4, 2}};  // out of order, overlapping
  SentSamplingMap sent;
  EXPECT_THROW(encode_plan({s}, 1, 1, &sent), StepFailed);
  s.images = {{0, 1, 1, 1}};
  s.image_pixels = {{1, nullptr}};
  EXPECT_THROW(encode_plan({s}, 1, 1, &sent), StepFailed);
}

v1::StepPlan good_plan() {
  SeqRequest s = row(1, 0, 8);
  s.images = {{2, 1, 2, 9}};
  s.image_pixels = {{9, image(64, 32, 3)}};
  SentSamplingMap sent;
  return encode_plan({s}, 1, 1, &sent);
}

TEST(ImageColumns, MalformedColumnsAreFormatErrors) {
  const auto refused = [](const std::function<void(v1::StepPlan*)>& edit) {
    v1::StepPlan p = good_plan();
    edit(&p);
    EXPECT_THROW(validate_images(p), FormatError);
  };
  refused([](v1::StepPlan* p) { p->add_n_images(1); });                                     // not one per row
  refused([](v1::StepPlan* p) { p->add_image_hashes(3); });                                 // arrays differ
  refused([](v1::StepPlan* p) { p->set_image_grid_h(0, 0); });                              // empty grid
  refused([](v1::StepPlan* p) { p->set_image_grid_w(0, 1u << 20); });                       // absurd grid
  refused([](v1::StepPlan* p) { p->set_image_first_pos(0, 8); });                           // starts after the row
  refused([](v1::StepPlan* p) { p->set_image_first_pos(0, UINT32_MAX - 1); });              // ends past the positions
  refused([](v1::StepPlan* p) { p->mutable_image_pixels(0)->mutable_rgb()->pop_back(); });  // rgb size
  refused([](v1::StepPlan* p) { p->mutable_image_pixels(0)->set_width(0); });
  refused([](v1::StepPlan* p) { p->mutable_image_pixels(0)->set_height(1u << 30); });
  refused([](v1::StepPlan* p) { *p->add_image_pixels() = p->image_pixels(0); });  // a hash twice
  refused([](v1::StepPlan* p) {
    p->clear_n_images();  // spans without n_images
  });
  EXPECT_NO_THROW(validate_images(good_plan()));
}

}  // namespace
}  // namespace ds
