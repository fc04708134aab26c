// Images inside a token sequence (vision input, vision-anchors.md §1): where an image's tokens
// sit, which encoding fills them, and the M-RoPE positions they and the text after them take.
// Both processes use these: the coordinator lays images out in a prompt, a worker's stage 0
// replaces the image tokens' embeddings, and every attention layer ropes by the positions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ds {

// One image's tokens: grid_h * grid_w consecutive <|image_pad|> positions from first_pos, in
// raster order over the merged grid (the vision tower's output rows, one per token).
struct ImageSpan {
  uint32_t first_pos = 0;
  uint32_t grid_h = 0;  // merged rows (patch rows / spatial merge)
  uint32_t grid_w = 0;  // merged columns
  uint64_t hash = 0;    // content key of the image's encoding (pixels and size)
  uint32_t n_tokens() const { return grid_h * grid_w; }
  uint32_t end_pos() const { return first_pos + n_tokens(); }
};

// nullptr when `images` (of a sequence) are well formed: non-empty grids, in position order, not
// overlapping; else why not.
const char* image_spans_problem(const std::vector<ImageSpan>& images);

// The M-RoPE positions (t, h, w streams) of sequence positions [start, start + n) given every
// image of the sequence that starts before start + n (well formed, image_spans_problem):
// text takes the same value in all three streams, one more per token, starting at 0; an image
// whose first token would take p takes t = p, h = p + row, w = p + col for its tokens, and the
// text after it continues at p + max(grid_h, grid_w). Without images: t = h = w = the position.
// Writes t[i], h[i], w[i] for i < n.
void mrope_positions(const std::vector<ImageSpan>& images, uint32_t start, size_t n, int32_t* t, int32_t* h,
                     int32_t* w);

// The rope position the token at sequence position `pos` (past every image) would take: pos plus
// the shift the images before it add (max(grid_h, grid_w) - grid_h * grid_w each, so negative).
int64_t mrope_text_position(const std::vector<ImageSpan>& images, uint32_t pos);

}  // namespace ds
