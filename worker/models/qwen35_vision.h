// The Qwen3.5 vision tower (an mmproj GGUF of llama.cpp's converter, projector "qwen3vl_merger"):
// image patches in, one LLM-token embedding per 2x2 block of patches out. The Qwen3-VL tower
// without deepstack: a Conv3d patch embedding, a learned position embedding resized to the image,
// `depth` pre-LayerNorm blocks of non-causal 2D-roped attention and a tanh-GELU MLP, then the
// merger (LayerNorm per patch, 4 patches concatenated, Linear, erf-GELU, Linear).
//
// Everything runs through the Backend interface, so the same code serves the CPU and CUDA
// backends.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/image_patches.h"  // PatchLayout
#include "common/vision_config.h"  // VisionConfig, read_vision_config
#include "kernels/cpu/matmul.h"

namespace ds {

class Backend;
class GgufFile;

// Reads and validates the mmproj: keys (read_vision_config), the position grid and every tensor's
// shape. text_hidden != 0 also requires
// out_hidden == text_hidden. Throws ds::ConfigError naming the key or tensor at fault (wrong
// projector type, deepstack layers, a missing tensor, a shape that disagrees, ...).
VisionConfig load_vision_config(const GgufFile& mmproj, uint32_t text_hidden = 0);

// How image_patches must cut an image for this tower: its patch and merge sizes, its frames and
// the mmproj's per-channel normalization (PatchLayout's defaults where the mmproj states none).
PatchLayout vision_patch_layout(const VisionConfig& c);

// One image of an encode() call.
struct VisionImage {
  const float* patches = nullptr;   // host [grid_h * grid_w][patch_floats()], merge-block order (below)
  uint32_t grid_h = 0, grid_w = 0;  // in patches; both multiples of merge
};

class VisionTower {
 public:
  // The GgufFile and the backend must outlive the tower (the CPU backend computes on the
  // mapping in place). text_hidden as for load_vision_config.
  VisionTower(const GgufFile& mmproj, Backend& be, uint32_t text_hidden = 0);
  ~VisionTower();
  VisionTower(const VisionTower&) = delete;
  VisionTower& operator=(const VisionTower&) = delete;

  const VisionConfig& config() const { return cfg_; }
  // LLM tokens of an image: grid_h * grid_w / merge^2.
  size_t tokens_of(const VisionImage& image) const;

  // Encodes n images in one pass (each image attends only to itself) into `out`: backend device
  // memory [sum of tokens_of(images[i])][out_hidden], image after image. Patches come in the HF
  // image processor's order: 2x2 blocks row-major over the image, and inside a block row-major
  // (patch k's place: block_row, block_col, in_row, in_col); a patch's floats are (C, T, py, px).
  // Throws std::invalid_argument for a grid that is empty or not a multiple of merge.
  void encode(const VisionImage* images, size_t n, float* out);

  // Floats per patch of each device buffer of one encode() call, in the order they are carved from
  // its one allocation: pixels, residual, LayerNorm output, qkv, attention / MLP output, MLP hidden.
  // Inline so that worker/cache/tower_sizing.cpp, built without this library, sets aside exactly this.
  static std::array<size_t, 6> scratch_row_floats(const VisionConfig& c) {
    const size_t h = c.hidden;
    return {c.patch_floats(), h, h, 3 * h, h, c.ffn};
  }
  // The device floats one encode() call over n_patches (all its images together) allocates.
  static size_t workspace_floats(const VisionConfig& c, size_t n_patches) {
    size_t per_patch = 0;
    for (size_t f : scratch_row_floats(c)) per_patch += f;
    return n_patches * per_patch;
  }
  // The most workspace_floats() any encode() call so far has allocated.
  size_t peak_workspace_floats() const { return peak_workspace_floats_; }

 private:
  struct Block {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    cpu::WeightView qkv, attn_out, ffn_up, ffn_down;
    const float *qkv_b, *attn_out_b, *ffn_up_b, *ffn_down_b;
  };
  struct Scratch;  // the device buffers of one encode() call

  void bind(const GgufFile& mmproj);
  void build_patch_matrix(const GgufFile& mmproj);
  void embed_patches(const VisionImage* images, size_t n, const Scratch& s);
  void run_block(const Block& b, const Scratch& s, size_t n_patches);
  void merge_patches(const Scratch& s, size_t n_patches, float* out);

  Backend& be_;
  VisionConfig cfg_;
  cpu::WeightView patch_w_;        // [hidden][patch_floats()]: both conv taps, f32 on the device
  float* patch_w_data_ = nullptr;  // owns patch_w_'s device floats
  const float* patch_b_ = nullptr;
  std::vector<float> pos_table_;  // host [pos_side^2][hidden]
  std::vector<Block> blocks_;
  const float *post_ln_w_ = nullptr, *post_ln_b_ = nullptr;
  cpu::WeightView mm0_, mm2_;
  const float *mm0_b_ = nullptr, *mm2_b_ = nullptr;
  // Host inputs of the current call, kept until it returns (a device may still read them):
  // position-embedding rows [patches][hidden], rope positions [2][patches], segment starts.
  std::vector<float> pos_rows_;
  std::vector<int32_t> positions_;
  std::vector<uint32_t> starts_;
  size_t peak_workspace_floats_ = 0;
};

}  // namespace ds
