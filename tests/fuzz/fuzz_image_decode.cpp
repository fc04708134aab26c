// libFuzzer entry point for image input: any bytes must either decode to a well-formed RGB image
// or throw MediaError; the same bytes read as an image URL (no media root) must either give bytes
// or throw MediaError; a decoded small image must preprocess or be refused with
// std::invalid_argument (an aspect ratio over 200). Anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "common/image_patches.h"
#include "coordinator/media/image_decode.h"
#include "coordinator/media/image_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ds::DecodeLimits limits;  // smaller than the defaults, so one input stays fast
  limits.max_width = limits.max_height = 4096;
  limits.max_pixels = 1u << 22;
  limits.max_jpeg_scans = 64;
  try {
    const ds::RgbImage image = ds::decode_image({data, size}, limits);
    if (image.width == 0 || image.height == 0 || image.rgb.size() != size_t{image.width} * image.height * 3) {
      std::abort();
    }
    if (uint64_t{image.width} * image.height <= 65536) {
      try {
        const ds::PreprocessedImage p = ds::preprocess_image(image);
        if (p.pixel_values.size() != p.grid.n_patches() * ds::PatchLayout{}.row_size()) std::abort();
      } catch (const std::invalid_argument&) {
      }
    }
  } catch (const ds::MediaError&) {
  }
  try {
    ds::ImageSourceOptions options;
    options.max_image_bytes = 1 << 16;
    (void)ds::load_image_bytes(std::string_view(reinterpret_cast<const char*>(data), size), options);
  } catch (const ds::MediaError&) {
  }
  return 0;
}
