// The tiny Qwen3.5-VL fixture's vision references (tests/data/reference/qwen35_vl.json, computed
// by HF transformers in float32): per image, the image processor's pixel rows and the tower's
// merged output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::test {

struct VisionReferenceImage {
  uint32_t grid_t = 0, grid_h = 0, grid_w = 0;  // in patches
  size_t n_tokens = 0;                          // grid_h * grid_w / 4
  bool resized = false;                         // went through the bicubic resize
  std::vector<float> pixel_values;              // [grid_h * grid_w][1536], block order
  std::vector<float> vision_embeds;             // [n_tokens][out_hidden]
  size_t embed_dim = 0;                         // out_hidden
};

// One reference prompt as a client sends it: the image files as data URLs (in prompt order), the
// user text after them, the expanded prompt ids and the 16 greedy tokens.
struct VisionReferencePrompt {
  std::vector<std::string> image_urls;
  std::string text;
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy_tokens;
};
VisionReferencePrompt load_vision_reference_prompt(const std::string& name);
// Path of the decompressed text model GGUF of the fixture.
std::string vision_model_path();

// Path of the decompressed mmproj GGUF the references were computed with.
std::string vision_mmproj_path();
std::vector<VisionReferenceImage> load_vision_reference_images();

}  // namespace ds::test
