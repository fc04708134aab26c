// The vision tower's hyper-parameters as the mmproj GGUF (llama.cpp's converter, projector
// "qwen3vl_merger") states them in its keys. Both processes read them: the coordinator for the
// image preprocessing (patch size, spatial merge: the resize factor and the token count), stage 0's
// worker to build the tower (worker/models/qwen35_vision.h adds the position grid and the tensors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ds {

class GgufFile;

struct VisionConfig {
  uint32_t patch_size = 0;                   // P: pixels per patch side
  uint32_t temporal = 2;                     // T: frames per patch (the converter writes two conv taps)
  uint32_t channels = 3;                     // C
  uint32_t hidden = 0;                       // the tower's width
  uint32_t ffn = 0;                          // the blocks' MLP width
  uint32_t depth = 0;                        // blocks
  uint32_t heads = 0;                        // attention heads (head_dim = hidden / heads, a multiple of 4)
  uint32_t head_dim = 0;                     //
  uint32_t merge = 0;                        // spatial merge: merge x merge patches make one LLM token
  uint32_t out_hidden = 0;                   // the merger's output width (= the text model's hidden size)
  uint32_t pos_side = 0;                     // the learned position grid is pos_side x pos_side
  float eps = 0;                             // the LayerNorms' epsilon (clip.vision.attention.layer_norm_epsilon)
  float rope_theta = 10000.0f;               // fixed by the architecture (the GGUF carries none)
  std::vector<float> image_mean, image_std;  // per channel, for the image preprocessor

  size_t patch_floats() const { return size_t{channels} * temporal * patch_size * patch_size; }
  size_t patches_per_token() const { return size_t{merge} * merge; }
};

// The keys of the mmproj, checked: the projector type (Qwen3-VL's merger without deepstack), every
// size non-zero, head_dim a multiple of 4, a positive LayerNorm epsilon, one mean / std per
// channel. pos_side stays 0 (the tensors say it). Throws ds::ConfigError naming the key at fault.
VisionConfig read_vision_config(const GgufFile& mmproj);

}  // namespace ds
