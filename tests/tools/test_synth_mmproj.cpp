// deltaserve-synth's vision towers (tools/synth/mmproj.h): the real Qwen3.5 tower's plan, a
// one-block file of its width that our loader accepts, and the tiny tower that loads, encodes an
// image with finite, image-dependent output on the CPU and serves images together with the tiny
// synthetic text model (whose built-in tokenizer carries <|image_pad|>).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/gguf.h"
#include "common/image_patches.h"
#include "common/model_config.h"
#include "tools/synth/generate.h"
#include "tools/synth/mmproj.h"
#include "tools/synth/shapes.h"
#include "worker/backend.h"
#include "worker/models/qwen35_vision.h"
#include "worker/stage_model.h"

namespace ds::synth {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / ("synth_mmproj_" + name + ".gguf")).string();
}

// A width x height RGB gradient with a `seed`-dependent pattern (sides multiples of 32).
RgbImage gradient(uint32_t width, uint32_t height, uint32_t seed) {
  RgbImage im{width, height, std::vector<uint8_t>(size_t{width} * height * 3)};
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      uint8_t* p = &im.rgb[(size_t{y} * width + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / width);
      p[1] = static_cast<uint8_t>(y * 255 / height);
      p[2] = static_cast<uint8_t>((x * 7 + y * 13 + seed * 101) % 256);
    }
  }
  return im;
}

const std::string& tiny_tower_path() {
  static const std::string path = [] {
    const std::string p = temp_path("tiny");
    write_synth_mmproj(mmproj_shape_by_name("mmproj-tiny"), p, 1, 2);
    return p;
  }();
  return path;
}

// The tower's merged output for one image on the CPU backend.
std::vector<float> encode_one(const GgufFile& g, const RgbImage& image) {
  const std::unique_ptr<Backend> be = make_cpu_backend(2);
  VisionTower tower(g, *be, 64);
  const PreprocessedImage pre = preprocess_image(image, ImageSizeLimits{32, 32 * 32, 1u << 20});
  const VisionImage v{pre.pixel_values.data(), pre.grid.h, pre.grid.w};
  const size_t n = tower.tokens_of(v) * tower.config().out_hidden;
  float* out = be->alloc(n);
  tower.encode(&v, 1, out);
  std::vector<float> host(n);
  be->download(host.data(), out, n);
  be->release(out);
  return host;
}

TEST(SynthMmproj, RealShapeIsTheQwen35Tower) {
  const MmprojShape s = mmproj_shape_by_name("mmproj-9b");
  EXPECT_EQ(s.depth, 27u);
  EXPECT_EQ(s.hidden, 1152u);
  EXPECT_EQ(s.heads, 16u);
  EXPECT_EQ(s.ffn, 4304u);
  EXPECT_EQ(s.patch, 16u);
  EXPECT_EQ(s.merge, 2u);
  EXPECT_EQ(s.pos_side * s.pos_side, 2304u);
  EXPECT_EQ(s.out_hidden, shape_by_name("9b").n_embd);
  EXPECT_EQ(mmproj_shape_by_name("mmproj-27b").out_hidden, 5120u);
  // 2 conv taps + bias, the grid, 27 blocks of 12 tensors, post_ln and the merger's 4.
  EXPECT_EQ(plan_mmproj_tensors(s).size(), 4u + 27 * 12 + 2 + 4);
  // Parameters: per block 4 h^2 + 2 h F (+ biases and norms), the merger 16 h^2 + 4 h D.
  const double h = 1152, F = 4304, D = 4096;
  const double approx = 27 * (4 * h * h + 2 * h * F) + 16 * h * h + 4 * h * D + 2 * 768 * h + 2304 * h;
  EXPECT_NEAR(static_cast<double>(s.n_params()), approx, 0.01 * approx);
  for (const char* bad : {"mmproj-13b", "mmproj-qwen3-embed-4b", "mmproj-", "9b"}) {
    EXPECT_THROW(mmproj_shape_by_name(bad), ConfigError) << bad;
  }
}

TEST(SynthMmproj, OneBlockOfTheRealWidthLoads) {
  MmprojShape s = mmproj_shape_by_name("mmproj-9b");
  s.depth = 1;  // 0.12 GB instead of 0.9
  const std::string path = temp_path("9b_one_block");
  write_synth_mmproj(s, path, 1, 2);
  {
    const GgufFile g = GgufFile::open(path);
    const VisionConfig c = load_vision_config(g, 4096);
    EXPECT_EQ(c.hidden, 1152u);
    EXPECT_EQ(c.head_dim, 72u);
    EXPECT_EQ(c.pos_side, 48u);
    EXPECT_EQ(c.patch_floats(), 1536u);
    EXPECT_EQ(g.tensor("mm.0.weight").type, GgmlType::F16);
    EXPECT_EQ(g.tensor("v.position_embd.weight").type, GgmlType::F32);
    EXPECT_THROW(load_vision_config(g, 5120), ConfigError);  // projects to the 9B's width only
  }
  std::filesystem::remove(path);
}

TEST(SynthMmproj, TinyTowerEncodesAnImage) {
  const GgufFile g = GgufFile::open(tiny_tower_path());
  const VisionConfig c = load_vision_config(g, 64);
  EXPECT_EQ(c.depth, 2u);
  EXPECT_EQ(c.out_hidden, 64u);
  const std::vector<float> a = encode_one(g, gradient(96, 64, 1));  // 4 x 6 patches: 6 tokens
  ASSERT_EQ(a.size(), 6u * 64);
  double lo = a[0], hi = a[0];
  for (float x : a) {
    ASSERT_TRUE(std::isfinite(x));
    lo = std::min<double>(lo, x), hi = std::max<double>(hi, x);
  }
  EXPECT_GT(hi - lo, 0.1);                           // not flat
  EXPECT_EQ(encode_one(g, gradient(96, 64, 1)), a);  // deterministic
  EXPECT_NE(encode_one(g, gradient(96, 64, 2)), a);  // and the pixels matter
}

TEST(SynthMmproj, TinyTowerServesImagesWithTheTinyTextModel) {
  const std::string text = temp_path("tiny_text");
  write_synth_gguf(shape_by_name("tiny"), text, 1, 2);
  auto gguf = std::make_shared<const GgufFile>(GgufFile::open(text));
  const ModelConfig cfg = load_model_config(*gguf);
  ASSERT_EQ(cfg.image_token_id, 267);  // the built-in tokenizer's <|image_pad|>
  StageOptions so;
  so.n_threads = 2;
  so.mmproj = std::make_shared<const GgufFile>(GgufFile::open(tiny_tower_path()));
  auto stage = load_cpu_stage(gguf, cfg, {0, cfg.n_layer}, so);
  // 3 text tokens, a 64 x 64 image (2 x 2 merged tokens), 2 text tokens; the last row's logits.
  const auto run = [&](uint64_t seq, uint32_t pattern) {
    StepInput in;
    SeqStep s{seq, 0, {10, 20, 265, 267, 267, 267, 267, 266, 40}, {8}};
    s.images.push_back(ImageSpan{3, 2, 2, 1000 + pattern});
    in.seqs.push_back(s);
    in.images.push_back({1000 + pattern, gradient(64, 64, pattern)});
    StepOutput out;
    stage->forward(in, &out);
    return out.logits;
  };
  const std::vector<float> a = run(1, 1), b = run(2, 2);
  ASSERT_EQ(a.size(), cfg.n_vocab);
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NE(a, b);  // the image reaches the logits
}

}  // namespace
}  // namespace ds::synth
