// The Qwen3.5 vision tower on the CUDA backend (issue 31): every fixture image's embeddings
// against the transformers float32 reference (tests/data/reference/vl_img*_vision_embeds), the
// same check the CPU tower passes within 1e-5. Skips when no CUDA device is visible (CI builds it
// with nvcc and has no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "common/gguf.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/testutil/vision_reference.h"
#include "worker/backend.h"
#include "worker/cuda_backend.h"
#include "worker/models/qwen35_vision.h"

namespace ds::test {
namespace {

// The CUDA ops are f32 like the CPU ones but sum in other orders (tiles, warp reductions) and
// use the device's expf / tanhf: 1e-4 of the largest value leaves two orders of magnitude for
// that over 24 blocks and still fails any wrong op (those are off by 1e-1 or more).
constexpr double kReferenceTol = 1e-4;

TEST(VisionTowerCuda, MatchesHfReferenceOnEveryFixtureImage) {
  DS_REQUIRE_GPU();
  const GgufFile mmproj = GgufFile::open(vision_mmproj_path());
  const std::vector<VisionReferenceImage> refs = load_vision_reference_images();
  ASSERT_EQ(refs.size(), 4u);
  const std::unique_ptr<Backend> be = make_cuda_backend(0);
  VisionTower tower(mmproj, *be);
  for (size_t i = 0; i < refs.size(); ++i) {
    const VisionReferenceImage& r = refs[i];
    const VisionImage image{r.pixel_values.data(), r.grid_h, r.grid_w};
    const size_t n = tower.tokens_of(image) * tower.config().out_hidden;
    ASSERT_EQ(n, r.vision_embeds.size());
    float* out = be->alloc(n);
    tower.encode(&image, 1, out);
    std::vector<float> got(n);
    be->download(got.data(), out, n);
    be->release(out);
    double diff = 0, scale = 0;
    for (size_t k = 0; k < n; ++k) {
      diff = std::max(diff, std::abs(static_cast<double>(got[k]) - r.vision_embeds[k]));
      scale = std::max(scale, std::abs(static_cast<double>(r.vision_embeds[k])));
    }
    std::printf("image %zu (%ux%u patches): max |delta| / max |ref| = %.3g\n", i, r.grid_h, r.grid_w, diff / scale);
    EXPECT_LE(diff / scale, kReferenceTol) << "image " << i;
  }
}

}  // namespace
}  // namespace ds::test
