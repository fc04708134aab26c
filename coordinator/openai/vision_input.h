// Image parts of a chat request to image tokens (issue 31), as the HF Qwen3-VL processor does it:
// each image is loaded (data:, bare base64, file:// under --media-path), decoded to RGB, resized
// by smart_resize within the min / max pixels (bicubic, PIL's filter) and hashed; the chat
// template's single <|image_pad|> per image is then expanded to the image's token count (one pad
// per merged 2x2 patch block) and the image's span recorded for the engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/image_patches.h"
#include "coordinator/http/server_options.h"
#include "coordinator/serving/generation.h"

namespace ds::openai {

// One image, ready for the workers: pixels at their final size and the merged grid they make.
struct PreparedImage {
  std::shared_ptr<const RgbImage> pixels;
  uint32_t grid_h = 0, grid_w = 0;  // merged rows and columns (tokens = grid_h * grid_w)
  uint64_t hash = 0;                // image_content_hash(*pixels)
  uint32_t n_tokens() const { return grid_h * grid_w; }
};

// The 64-bit content key of an image: FNV-1a over its width, height (4 bytes each, little endian)
// and RGB bytes. The resized pixels are hashed, so two files that decode and resize to the same
// pixels share encodings and prefix-cache entries; any pixel difference changes it.
uint64_t image_content_hash(const RgbImage& image);

// smart_resize bounds of `vision`: factor patch * merge, min / max pixels from the token bounds.
ImageSizeLimits image_size_limits(const VisionOptions& vision);

// Loads and prepares every image of a request, in order. Throws ApiError 400 naming the problem
// and the image (messages: "image 2: ..."): no --mmproj, too many images (--max-images-per-request),
// an unreadable URL or image, a size smart_resize refuses.
std::vector<PreparedImage> prepare_images(const std::vector<std::string>& urls, const VisionOptions& vision);

// Replaces the k-th `pad_id` of `ids` by images[k].n_tokens() pads and records images[k]'s span
// (its first position in the expanded ids) in `out`. Throws ApiError 400 unless `ids` holds
// exactly one pad per image (a template that renders images otherwise cannot be served).
std::vector<int32_t> expand_image_pads(const std::vector<int32_t>& ids, const std::vector<PreparedImage>& images,
                                       int32_t pad_id, std::vector<PromptImage>* out);

}  // namespace ds::openai
