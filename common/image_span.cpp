#include "common/image_span.h"

#include <algorithm>

namespace ds {

const char* image_spans_problem(const std::vector<ImageSpan>& images) {
  uint32_t end = 0;
  for (const ImageSpan& im : images) {
    if (im.grid_h == 0 || im.grid_w == 0) return "an image with an empty grid";
    if (uint64_t{im.grid_h} * im.grid_w > (uint64_t{1} << 24)) return "an image grid over 2^24 tokens";
    if (im.first_pos < end) return "images out of order or overlapping";
    if (uint64_t{im.first_pos} + im.n_tokens() > UINT32_MAX) return "an image past the position range";
    end = im.end_pos();
  }
  return nullptr;
}

namespace {

// How far text positions lag sequence positions after an image: its tokens advance the rope
// position by max(grid_h, grid_w), not by their count.
int64_t image_shift(const ImageSpan& im) {
  return int64_t{std::max(im.grid_h, im.grid_w)} - int64_t{im.n_tokens()};
}

}  // namespace

int64_t mrope_text_position(const std::vector<ImageSpan>& images, uint32_t pos) {
  int64_t shift = 0;
  for (const ImageSpan& im : images) {
    if (im.end_pos() > pos) break;
    shift += image_shift(im);
  }
  return int64_t{pos} + shift;
}

void mrope_positions(const std::vector<ImageSpan>& images, uint32_t start, size_t n, int32_t* t, int32_t* h,
                     int32_t* w) {
  int64_t shift = 0;  // of the images wholly before the current position
  size_t next = 0;    // first image not wholly before it
  for (size_t i = 0; i < n; ++i) {
    const uint32_t pos = start + static_cast<uint32_t>(i);
    while (next < images.size() && images[next].end_pos() <= pos) shift += image_shift(images[next++]);
    if (next < images.size() && images[next].first_pos <= pos) {
      const ImageSpan& im = images[next];
      const uint32_t k = pos - im.first_pos;
      const auto p0 = static_cast<int32_t>(int64_t{im.first_pos} + shift);
      t[i] = p0;
      h[i] = p0 + static_cast<int32_t>(k / im.grid_w);
      w[i] = p0 + static_cast<int32_t>(k % im.grid_w);
    } else {
      t[i] = h[i] = w[i] = static_cast<int32_t>(int64_t{pos} + shift);
    }
  }
}

}  // namespace ds
