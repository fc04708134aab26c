// The vision tower's memory beside stage 0's pools (worker/cache/tower_sizing.h) for the tiny VL
// fixture's mmproj, on cuda (matrices copied to the device, host buffers not counted). Every
// expected number is derived here from the fixture's shapes, the way the tower binds and runs it
// (worker/models/qwen35_vision.cpp), not read from the code under test; the cpu count is checked
// end to end in tests/e2e/test_capacity_e2e.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/gguf.h"
#include "common/vision_config.h"
#include "tests/testutil/vision_reference.h"
#include "worker/cache/tower_sizing.h"

namespace ds {
namespace {

constexpr uint64_t kF32 = 4, kF16 = 2, kI32 = 4;

struct Fixture {
  GgufFile mmproj = GgufFile::open(test::vision_mmproj_path());
  VisionConfig v = read_vision_config(mmproj);
};

// cuda, images of at most `tokens`, the embedder's default cache limits unless given.
TowerMemoryInputs cuda_inputs(const VisionConfig& v, uint32_t tokens, size_t max_bytes = size_t{256} << 20) {
  // out_hidden is the text model's hidden size (the tower refuses an mmproj where it is not).
  return TowerMemoryInputs{.n_embd = v.out_hidden,
                           .max_image_tokens = tokens,
                           .device_copies = true,
                           .cache_max_images = 16,
                           .cache_max_bytes = max_bytes};
}

// At 16 tokens (64 patches) the fixture (hidden h 64, ffn F 128, depth 2, merge m 2, 16-pixel
// patches of 3 channels x 2 frames, out_hidden D 64, F16 matrices) takes
//   matrices:  2 * (3h^2 + h^2 + 2hF) + (m^2 h)^2 + m^2 h D = 147456 F16       = 294912 B
//   vectors:   2 * (2 LayerNorms 4h + biases 3h + h + F + h) + patch bias h
//              + post_ln 2h + merger biases m^2 h + D = 1920 f32            =   7680 B
//   patches:   the two taps as one f32 matrix [h][3 * 2 * 16^2]            = 393216 B
//   workspace: 64 patches * (1536 + h + h + 3h + h + F) f32 + 2 * 64 int32   = 524800 B
//   encodings: 16 cached images of 16 tokens * D f32, and the one being made =  69632 B
// = 1290240 B (the position grid stays on the host: not counted on cuda).
TEST(VisionTowerSizing, CudaCountOfTheTinyVlFixture) {
  const Fixture f;
  const VisionConfig& v = f.v;
  const uint64_t h = v.hidden, F = v.ffn, m2 = v.patches_per_token(), D = v.out_hidden, depth = v.depth;
  for (const GgufTensor& t : f.mmproj.tensors()) {
    const bool matrix = t.n_dims >= 2 && t.name != "v.position_embd.weight" && t.name.rfind("v.patch_embd.", 0) != 0;
    if (matrix) {
      EXPECT_EQ(t.type, GgmlType::F16) << t.name << ": the derivation below takes 2 bytes an element";
    }
  }

  // Per block qkv [h -> 3h], attn_out [h -> h], ffn_up [h -> F], ffn_down [F -> h]; the merger's
  // mm.0 [m^2 h -> m^2 h] and mm.2 [m^2 h -> D]: device copies as stored.
  const uint64_t matrices = (depth * (3 * h * h + h * h + 2 * h * F) + m2 * h * m2 * h + m2 * h * D) * kF16;
  // f32 copies: per block ln1 and ln2 (weight and bias) and the four biases; the patch bias,
  // post_ln, and the merger's two biases.
  const uint64_t vectors = (depth * (4 * h + 3 * h + h + F + h) + h + 2 * h + m2 * h + D) * kF32;
  // The patch embedding's two conv taps merged into one f32 matrix [h][C T P^2].
  const uint64_t patch_matrix = h * v.channels * v.temporal * v.patch_size * v.patch_size * kF32;

  const uint64_t tokens = 16, n = tokens * m2;
  // One encode() of the largest image: pixel rows, residual, LayerNorm output, qkv, attention
  // output, MLP hidden; and the rope positions (row and column per patch).
  const uint64_t pixels = uint64_t{v.channels} * v.temporal * v.patch_size * v.patch_size;
  const uint64_t workspace = n * (pixels + h + h + 3 * h + h + F) * kF32 + 2 * n * kI32;
  const uint64_t image = tokens * D * kF32;
  const uint64_t encodings = 16 * image + image;  // the byte cap (256 MiB) does not bind

  const TowerMemory m = vision_tower_memory(f.mmproj, v, cuda_inputs(v, 16));
  EXPECT_EQ(m.weight_bytes, matrices + vectors + patch_matrix);
  EXPECT_EQ(m.workspace_bytes, workspace);
  EXPECT_EQ(m.encoding_bytes, encodings);
  EXPECT_EQ(m.total(), matrices + vectors + patch_matrix + workspace + encodings);

  // The same numbers worked out by hand above, so a change of the fixture shows here.
  EXPECT_EQ(matrices, 294912u);
  EXPECT_EQ(vectors, 7680u);
  EXPECT_EQ(patch_matrix, 393216u);
  EXPECT_EQ(workspace, 524800u);
  EXPECT_EQ(encodings, 69632u);
  EXPECT_EQ(m.total(), 1290240u);
}

// The workspace grows with the largest image (0: serve's default of 4096 tokens); the encodings
// stop at the cache's byte cap, plus the one image being encoded.
TEST(VisionTowerSizing, WorkspaceFollowsTheLargestImageAndEncodingsTheByteCap) {
  const Fixture f;
  const VisionConfig& v = f.v;
  const uint64_t per_patch =
      (uint64_t{v.channels} * v.temporal * v.patch_size * v.patch_size + 6 * v.hidden + v.ffn) * kF32 + 2 * kI32;
  const TowerMemory at_default = vision_tower_memory(f.mmproj, v, cuda_inputs(v, 0));
  EXPECT_EQ(at_default.workspace_bytes, kDefaultImageMaxTokens * v.patches_per_token() * per_patch);
  EXPECT_EQ(at_default.weight_bytes, vision_tower_memory(f.mmproj, v, cuda_inputs(v, 16)).weight_bytes);

  const uint64_t image = 16 * v.out_hidden * kF32;  // 4096 B
  const TowerMemory capped = vision_tower_memory(f.mmproj, v, cuda_inputs(v, 16, 10000));
  EXPECT_EQ(capped.encoding_bytes, 10000 + image);
}

}  // namespace
}  // namespace ds
