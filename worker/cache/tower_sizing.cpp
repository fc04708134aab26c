// The vision tower's memory beside the pools (see tower_sizing.h).
#include "worker/cache/tower_sizing.h"

#include <algorithm>
#include <string>

#include "common/gguf.h"
#include "common/vision_config.h"
#include "worker/models/qwen35_vision.h"  // VisionTower::workspace_floats (inline: no link to ds_model)

namespace ds {
namespace {

constexpr uint64_t kF32 = sizeof(float);

// The tensors as the tower binds them (VisionTower::bind): matrices through Backend::weight, the
// two patch taps merged into one f32 matrix, the position grid dequantized on the host, the rest
// through Backend::f32_tensor.
uint64_t weight_bytes(const GgufFile& mmproj, bool device_copies) {
  uint64_t total = 0;
  for (const GgufTensor& t : mmproj.tensors()) {
    if (t.name == "v.position_embd.weight") {
      total += device_copies ? 0 : t.n_elements() * kF32;
    } else if (t.name.rfind("v.patch_embd.weight", 0) == 0) {
      total += t.n_elements() * kF32;
    } else if (t.n_dims >= 2) {
      total += device_copies ? t.nbytes : 0;
    } else {
      total += t.n_elements() * kF32;
    }
  }
  return total;
}

// One encode() call of n_patches: the tower's scratch (VisionTower::workspace_floats, the function
// its allocation uses) and rope positions, and on the host (counted on cpu only) the patch floats,
// position rows and RGB pixels (the plan's and the step's copy).
uint64_t workspace_bytes(const VisionConfig& v, uint64_t n_patches, bool device_copies) {
  const uint64_t scratch = VisionTower::workspace_floats(v, n_patches) * kF32;
  const uint64_t positions = 2 * n_patches * sizeof(int32_t);
  if (device_copies) return scratch + positions;
  const uint64_t rgb = 2 * n_patches * v.patch_size * v.patch_size * 3;
  return scratch + positions + n_patches * (v.patch_floats() + v.hidden) * kF32 + rgb;
}

}  // namespace

TowerMemory vision_tower_memory(const GgufFile& mmproj, const VisionConfig& vision, const TowerMemoryInputs& in) {
  const uint64_t tokens = in.max_image_tokens != 0 ? in.max_image_tokens : kDefaultImageMaxTokens;
  const uint64_t image = tokens * in.n_embd * kF32;  // one encoded image
  TowerMemory m;
  m.weight_bytes = weight_bytes(mmproj, in.device_copies);
  m.workspace_bytes = workspace_bytes(vision, tokens * vision.patches_per_token(), in.device_copies);
  m.encoding_bytes = std::min<uint64_t>(in.cache_max_bytes, in.cache_max_images * image) + image;
  return m;
}

}  // namespace ds
