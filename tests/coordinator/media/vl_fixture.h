// The images of the vision fixture (tests/data/reference/qwen35_vl.json, computed by HF
// transformers): their data URLs, and the grids and pixel_values the HF processor made of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/image_patches.h"

namespace ds::test {

struct FixtureImage {
  uint32_t width = 0, height = 0;
  std::string format, data_url;  // format: "png" or "jpeg"
  bool resized = false;
  PatchGrid grid;
  uint32_t n_tokens = 0;
  std::vector<float> pixel_values;  // [n_patches][1536]
};

const std::vector<FixtureImage>& fixture_images();

// The fixture's preprocessor_config.json, as our types hold it.
struct FixtureProcessor {
  ImageSizeLimits limits;
  PatchLayout layout;
  double rescale_factor = 0;  // image_patches assumes 1/255
};
FixtureProcessor fixture_processor();

// The image file inside the first fixture image of `format` ("png" or "jpeg").
std::vector<uint8_t> fixture_file(const std::string& format);

}  // namespace ds::test
