// The mmproj's vision keys (see vision_config.h).
#include "common/vision_config.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "common/gguf.h"

namespace ds {
namespace {

constexpr const char* kProjectorType = "qwen3vl_merger";  // Qwen3-VL's merger, reused by Qwen3.5
constexpr float kDefaultEps = 1e-6f;                      // HF's vision LayerNorm epsilon

uint32_t required_u32(const GgufFile& g, const std::string& key) {
  if (!g.has(key)) throw ConfigError("mmproj: missing key " + key);
  return g.get_u32(key);
}

// The projector and the parts of Qwen3-VL that Qwen3.5 dropped (deepstack).
void check_projector(const GgufFile& g) {
  const std::string type = g.get_string_or("clip.projector_type", "");
  if (type != kProjectorType) {
    throw ConfigError("mmproj: clip.projector_type is '" + type + "', expected '" + kProjectorType +
                      "' (the Qwen3-VL / Qwen3.5 merger)");
  }
  if (!g.get_bool_or("clip.has_vision_encoder", true)) throw ConfigError("mmproj: clip.has_vision_encoder is false");
  if (g.has("clip.vision.is_deepstack_layers")) {
    for (int64_t on : g.get_int_array("clip.vision.is_deepstack_layers")) {
      if (on != 0) throw ConfigError("mmproj: deepstack layers (Qwen3-VL) are not supported; Qwen3.5 has none");
    }
  }
}

}  // namespace

VisionConfig read_vision_config(const GgufFile& g) {
  check_projector(g);
  VisionConfig c;
  c.patch_size = required_u32(g, "clip.vision.patch_size");
  c.hidden = required_u32(g, "clip.vision.embedding_length");
  c.ffn = required_u32(g, "clip.vision.feed_forward_length");
  c.depth = required_u32(g, "clip.vision.block_count");
  c.heads = required_u32(g, "clip.vision.attention.head_count");
  c.out_hidden = required_u32(g, "clip.vision.projection_dim");
  c.merge = required_u32(g, "clip.vision.spatial_merge_size");
  // The converter writes the text model's rms_norm_eps here, not the vision config's (HF: 1e-6);
  // the two agree for the Qwen3.5 releases and the fixture, so the file's value is used.
  c.eps = g.get_f32_or("clip.vision.attention.layer_norm_epsilon", kDefaultEps);
  if (g.has("clip.vision.image_mean")) c.image_mean = g.get_f32_array("clip.vision.image_mean");
  if (g.has("clip.vision.image_std")) c.image_std = g.get_f32_array("clip.vision.image_std");
  if (c.patch_size == 0 || c.hidden == 0 || c.ffn == 0 || c.depth == 0 || c.heads == 0 || c.out_hidden == 0 ||
      c.merge == 0) {
    throw ConfigError("mmproj: a clip.vision size is zero");
  }
  if (c.hidden % c.heads != 0) throw ConfigError("mmproj: embedding_length is not a multiple of head_count");
  c.head_dim = c.hidden / c.heads;
  if (c.head_dim % 4 != 0) {
    throw ConfigError("mmproj: head_dim " + std::to_string(c.head_dim) + " is not a multiple of 4 (2D RoPE)");
  }
  if (!(c.eps > 0) || !std::isfinite(c.eps)) throw ConfigError("mmproj: layer_norm_epsilon must be positive");
  if ((!c.image_mean.empty() && c.image_mean.size() != c.channels) ||
      (!c.image_std.empty() && c.image_std.size() != c.channels)) {
    throw ConfigError("mmproj: image_mean / image_std need one value per channel");
  }
  return c;
}

}  // namespace ds
