#include "tools/synth/mmproj.h"

#include "common/error.h"

namespace ds::synth {
namespace {

constexpr const char* kPrefix = "mmproj-";

// HF Qwen3_5VisionConfig's defaults (vision-anchors.md §1).
MmprojShape qwen35_tower(const std::string& name, uint32_t out_hidden) {
  MmprojShape s;
  s.name = name;
  s.depth = 27;
  s.hidden = 1152;
  s.heads = 16;
  s.ffn = 4304;
  s.out_hidden = out_hidden;
  return s;
}

// The tiny VL fixture's tower (tests/data/tiny-qwen35-vl-mmproj-f16.gguf).
MmprojShape tiny_tower() {
  MmprojShape s;
  s.name = "mmproj-tiny";
  s.depth = 2;
  s.hidden = 64;
  s.heads = 4;
  s.ffn = 128;
  s.pos_side = 8;
  s.out_hidden = 64;
  return s;
}

void add_linear(std::vector<TensorPlan>& out, const std::string& p, uint64_t in, uint64_t rows) {
  out.push_back({p + ".weight", GgmlType::F16, {in, rows}, Init::kMatrix});
  out.push_back({p + ".bias", GgmlType::F32, {rows}, Init::kBias});
}

void add_layer_norm(std::vector<TensorPlan>& out, const std::string& p, uint64_t dim) {
  out.push_back({p + ".weight", GgmlType::F32, {dim}, Init::kNorm});
  out.push_back({p + ".bias", GgmlType::F32, {dim}, Init::kBias});
}

void add_mmproj_metadata(GgufStreamWriter& w, const MmprojShape& s, uint64_t seed) {
  const std::string v = "clip.vision.";
  w.add_string("general.architecture", "clip");
  w.add_string("general.type", "mmproj");
  w.add_string("general.name",
               "deltaserve-synth qwen35 vision " + s.name + " (random weights, seed " + std::to_string(seed) + ")");
  w.add_u32("general.file_type", 1);  // mostly F16
  w.add_u32("general.quantization_version", 2);
  w.add_string("clip.projector_type", "qwen3vl_merger");
  w.add_bool("clip.has_vision_encoder", true);
  w.add_bool("clip.use_gelu", true);
  w.add_u32(v + "projection_dim", s.out_hidden);
  w.add_u32(v + "image_size", s.pos_side * s.patch);
  w.add_u32(v + "patch_size", s.patch);
  w.add_u32(v + "embedding_length", s.hidden);
  w.add_u32(v + "feed_forward_length", s.ffn);
  w.add_u32(v + "block_count", s.depth);
  w.add_u32(v + "attention.head_count", s.heads);
  w.add_f32(v + "attention.layer_norm_epsilon", s.eps);
  w.add_u32(v + "spatial_merge_size", s.merge);
  w.add_f32_array(v + "image_mean", {0.5f, 0.5f, 0.5f});
  w.add_f32_array(v + "image_std", {0.5f, 0.5f, 0.5f});
}

}  // namespace

uint64_t MmprojShape::n_params() const {
  uint64_t n = 0;
  for (const TensorPlan& t : plan_mmproj_tensors(*this)) {
    uint64_t e = 1;
    for (uint64_t d : t.ne) e *= d;
    n += e;
  }
  return n;
}

bool is_mmproj_shape(const std::string& name) {
  return name.rfind(kPrefix, 0) == 0;
}

MmprojShape mmproj_shape_by_name(const std::string& name) {
  if (name == "mmproj-tiny") return tiny_tower();
  const std::string text = is_mmproj_shape(name) ? name.substr(std::string(kPrefix).size()) : "";
  if (!text.empty() && text != "tiny" && text != "tiny-moe" && text.rfind("qwen3-", 0) != 0) {
    try {
      return qwen35_tower(name, shape_by_name(text).n_embd);
    } catch (const ConfigError&) {  // not a text shape: the message below names the choices
    }
  }
  throw ConfigError("unknown mmproj shape '" + name +
                    "' (choose mmproj-0.8b, mmproj-2b, mmproj-4b, mmproj-9b, mmproj-27b, mmproj-35b-a3b, "
                    "mmproj-122b-a10b or mmproj-tiny)");
}

std::vector<TensorPlan> plan_mmproj_tensors(const MmprojShape& s) {
  const uint64_t h = s.hidden, P = s.patch, wide = uint64_t{s.merge} * s.merge * h;
  const uint64_t conv_fan_in = 2 * 3 * P * P;  // both temporal taps see the same frame: they add up
  std::vector<TensorPlan> out;
  for (const char* tap : {"v.patch_embd.weight", "v.patch_embd.weight.1"}) {
    out.push_back({tap, GgmlType::F16, {P, P, 3, h}, Init::kMatrix, conv_fan_in});
  }
  out.push_back({"v.patch_embd.bias", GgmlType::F32, {h}, Init::kBias});
  out.push_back({"v.position_embd.weight", GgmlType::F32, {h, uint64_t{s.pos_side} * s.pos_side}, Init::kTable});
  for (uint32_t i = 0; i < s.depth; ++i) {
    const std::string p = "v.blk." + std::to_string(i) + ".";
    add_layer_norm(out, p + "ln1", h);
    add_linear(out, p + "attn_qkv", h, 3 * h);
    add_linear(out, p + "attn_out", h, h);
    add_layer_norm(out, p + "ln2", h);
    add_linear(out, p + "ffn_up", h, s.ffn);
    add_linear(out, p + "ffn_down", s.ffn, h);
  }
  add_layer_norm(out, "v.post_ln", h);
  add_linear(out, "mm.0", wide, wide);
  add_linear(out, "mm.2", wide, s.out_hidden);
  return out;
}

SynthSummary write_synth_mmproj(const MmprojShape& shape, const std::string& path, uint64_t seed, int threads) {
  GgufStreamWriter w;
  add_mmproj_metadata(w, shape, seed);
  return write_planned(w, plan_mmproj_tensors(shape), path, seed, threads);
}

}  // namespace ds::synth
