// Image parts to image tokens (see vision_input.h).
#include "coordinator/openai/vision_input.h"

#include <algorithm>
#include <stdexcept>

#include "coordinator/http/api_error.h"
#include "coordinator/media/image_source.h"

namespace ds::openai {
namespace {

uint64_t fnv1a(uint64_t h, const uint8_t* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t fnv1a_u32(uint64_t h, uint32_t v) {
  const uint8_t le[4] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v >> 16),
                         static_cast<uint8_t>(v >> 24)};
  return fnv1a(h, le, 4);
}

[[noreturn]] void refuse(size_t index, const std::string& why) {
  throw ApiError(400, "image " + std::to_string(index + 1) + ": " + why, "messages");
}

PreparedImage prepare_one(const std::string& url, size_t index, const VisionOptions& vision) {
  ImageSourceOptions source;
  source.media_root = vision.media_root;
  source.allowed_media_domains = vision.allowed_media_domains;
  source.fetch_timeout = vision.media_fetch_timeout;
  RgbImage decoded;
  try {
    decoded = load_image(url, source);
  } catch (const MediaError& e) {
    refuse(index, e.what());
  }
  const ImageSizeLimits limits = image_size_limits(vision);
  ImageSize size;
  try {
    size = smart_resize(decoded.width, decoded.height, limits);
  } catch (const std::invalid_argument& e) {
    refuse(index, std::string("its size cannot be used: ") + e.what());
  }
  auto pixels = std::make_shared<RgbImage>(size.width == decoded.width && size.height == decoded.height
                                               ? std::move(decoded)
                                               : resize_bicubic(decoded, size.width, size.height));
  PreparedImage out;
  out.grid_h = size.height / limits.factor;
  out.grid_w = size.width / limits.factor;
  out.hash = image_content_hash(*pixels);
  out.pixels = std::move(pixels);
  return out;
}

}  // namespace

uint64_t image_content_hash(const RgbImage& image) {
  uint64_t h = 0xcbf29ce484222325ULL;
  h = fnv1a_u32(h, image.width);
  h = fnv1a_u32(h, image.height);
  return fnv1a(h, image.rgb.data(), image.rgb.size());
}

ImageSizeLimits image_size_limits(const VisionOptions& vision) {
  ImageSizeLimits limits;
  limits.factor = vision.patch_size * vision.merge;
  const uint64_t per_token = uint64_t{limits.factor} * limits.factor;
  limits.min_pixels = uint64_t{vision.image_min_tokens} * per_token;
  limits.max_pixels = uint64_t{vision.image_max_tokens} * per_token;
  return limits;
}

std::vector<PreparedImage> prepare_images(const std::vector<std::string>& urls, const VisionOptions& vision) {
  if (urls.empty()) return {};
  if (!vision.enabled) {
    throw ApiError(400, "Image inputs are not supported by this server: it was started without --mmproj", "messages");
  }
  if (urls.size() > vision.max_images_per_request) {
    throw ApiError(400,
                   "The request has " + std::to_string(urls.size()) + " images; this server accepts at most " +
                       std::to_string(vision.max_images_per_request) + " per request (--max-images-per-request)",
                   "messages");
  }
  std::vector<PreparedImage> out;
  for (size_t i = 0; i < urls.size(); ++i) out.push_back(prepare_one(urls[i], i, vision));
  return out;
}

std::vector<int32_t> expand_image_pads(const std::vector<int32_t>& ids, const std::vector<PreparedImage>& images,
                                       int32_t pad_id, std::vector<PromptImage>* out) {
  std::vector<int32_t> expanded;
  size_t next = 0;
  for (const int32_t id : ids) {
    if (id != pad_id || images.empty()) {
      expanded.push_back(id);
      continue;
    }
    if (next == images.size()) break;  // more pads than images: refused below
    const PreparedImage& im = images[next++];
    PromptImage p;
    p.span.first_pos = static_cast<uint32_t>(expanded.size());
    p.span.grid_h = im.grid_h;
    p.span.grid_w = im.grid_w;
    p.span.hash = im.hash;
    p.pixels = im.pixels;
    out->push_back(std::move(p));
    expanded.insert(expanded.end(), im.n_tokens(), pad_id);
  }
  const auto pads = static_cast<size_t>(std::count(ids.begin(), ids.end(), pad_id));
  if (!images.empty() && pads != images.size()) {
    throw ApiError(400,
                   "The chat template rendered " + std::to_string(pads) + " image placeholders for " +
                       std::to_string(images.size()) + " images",
                   "messages");
  }
  return expanded;
}

}  // namespace ds::openai
