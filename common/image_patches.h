// Image preprocessing for the vision tower, exactly as the Hugging Face Qwen2-VL / Qwen3.5 image
// processor does it (Qwen2VLImageProcessorFast, torchvision backend; vision-anchors.md §2):
// smart_resize picks a size that is a multiple of patch * merge, resize_bicubic resamples to it,
// and image_patches normalizes and cuts the image into the rows the patch embedding reads.
// Pure C++ with no image library, so both the coordinator and the workers can use it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ds {

// An 8-bit RGB image: row-major, 3 bytes per pixel (R, G, B), rgb.size() == width * height * 3.
struct RgbImage {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

struct ImageSize {
  uint32_t width = 0, height = 0;
  bool operator==(const ImageSize&) const = default;
};

// The preprocessor config's resize bounds: factor = patch * merge, min_pixels = size.shortest_edge,
// max_pixels = size.longest_edge (Qwen3.5's preprocessor_config.json values are the defaults).
struct ImageSizeLimits {
  uint32_t factor = 32;
  uint64_t min_pixels = 65536;
  uint64_t max_pixels = 16777216;
};

// HF's smart_resize: both sides rounded to a multiple of `factor` (Python's round, ties to even);
// if that exceeds max_pixels, both shrink by sqrt(pixels / max_pixels) and floor to the factor (at
// least one factor); if it is under min_pixels, both grow by sqrt(min_pixels / pixels) and ceil.
// Throws std::invalid_argument for a zero side, a zero factor, or an aspect ratio over 200.
ImageSize smart_resize(uint32_t width, uint32_t height, const ImageSizeLimits& limits = {});

// Antialiased bicubic resampling (Keys kernel, a = -0.5, support widened by the downscale factor;
// PIL's filter), in the integer arithmetic of PyTorch's uint8 CPU kernel that torchvision's resize
// runs for HF: per axis the weights are computed in double, normalized, and rounded to int16 at the
// largest precision that holds the axis's largest weight; every output sample is that integer dot
// product rounded and clamped to 0..255. The horizontal pass runs first, into an 8-bit image, then
// the vertical one; an axis whose size does not change is copied. Equal sizes return a copy.
// Throws std::invalid_argument for an empty source or target, or a source whose rgb size is wrong.
RgbImage resize_bicubic(const RgbImage& image, uint32_t width, uint32_t height);

// How the vision tower cuts an image: patch x patch pixels per patch, merge x merge patches per
// LLM token, the frame repeated `temporal` times, and the per-channel normalization.
struct PatchLayout {
  uint32_t patch = 16, merge = 2, temporal = 2;
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f}, std{0.5f, 0.5f, 0.5f};
  // Floats in one patch row: 3 channels * temporal * patch * patch (1536 for Qwen3.5).
  size_t row_size() const { return size_t{3} * temporal * patch * patch; }
};

// grid_thw of one image, in patches: t = 1 (a still image), h = height / patch, w = width / patch.
struct PatchGrid {
  uint32_t t = 1, h = 0, w = 0;
  bool operator==(const PatchGrid&) const = default;
  uint64_t n_patches() const { return uint64_t{t} * h * w; }
};

// The grid of an image of `size` (whose sides are multiples of patch * merge, else
// std::invalid_argument).
PatchGrid patch_grid(ImageSize size, const PatchLayout& layout = {});

// The LLM tokens an image of that grid takes: t * (h / merge) * (w / merge).
uint32_t image_token_count(const PatchGrid& grid, uint32_t merge = 2);

// The pixel rows [n_patches][row_size] the patch embedding reads. Rows run over merge blocks
// (block_row, block_col) and, inside each block, over its patches (in_row, in_col); a row holds
// (channel, frame, py, px), the frame copies identical. A value is (x - 255 mean) / (255 std) in
// float32, the rescale fused into the normalization as HF's fast processor fuses it, so values
// match HF's bit for bit. The image's sides must be multiples of patch * merge (and the rgb size
// right), else std::invalid_argument.
std::vector<float> image_patches(const RgbImage& image, const PatchLayout& layout = {});

// What the vision tower takes for one image.
struct PreprocessedImage {
  PatchGrid grid;
  std::vector<float> pixel_values;  // [grid.n_patches()][layout.row_size()]
};

// smart_resize with `limits`, resize_bicubic when the size changes, then image_patches.
PreprocessedImage preprocess_image(const RgbImage& image, const ImageSizeLimits& limits = {},
                                   const PatchLayout& layout = {});

}  // namespace ds
