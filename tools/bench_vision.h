// deltaserve-bench --mmproj M.gguf --image-size 448,1024,2048: the vision rows (issue 31). Per
// image size, a synthetic RGB image (a gradient with a hashed pattern) goes through the server's
// preprocessing (common/image_patches: smart_resize within serve's default --image-min-tokens /
// --image-max-tokens, the bicubic resize when the size changes, the patch rows), then:
// - the vision tower alone (a VisionTower of its own on a backend of the stage's kind): the time
//   of one encode() from host patch rows to merged embeddings on the device (upload included, as
//   stage 0 does it) and the TFLOP/s that implies for vision_tower_flops;
// - the time to first token of a one-image prompt on the in-process stage holding the whole model
//   with the mmproj (8 text tokens, the image's pads, 8 text tokens; the stage cuts the patch rows,
//   encodes the image and prefills, the last row's logits downloaded), against a text prompt of
//   the same length; their ratio. Every repetition gives the image a new hash, so the stage's
//   encoding cache never answers.
// The table shows the best of --repeat runs; -o json one object per size with means and samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/image_patches.h"
#include "common/vision_config.h"
#include "tools/bench_report.h"
#include "tools/cli_args.h"

namespace ds {
class Backend;
class GgufFile;
class StageModel;
struct ModelConfig;
}  // namespace ds

namespace ds::bench {

// --image-size: comma-separated "N" (an N x N image) or "WxH" items, sides in [1, 16384]; fails
// through `usage` otherwise.
std::vector<ImageSize> parse_image_sizes(const cli::Usage& usage, const std::string& flag, const std::string& v);

// FLOPs of one encode of an image of n patches (N), counting 2 per multiply-add of the matrix
// products and of attention, nothing for the norms, RoPE, GELU and bias adds:
//   patch embedding   2 N (C T P^2) h
//   per block         2 N (3h^2 + h^2 + 2 h F)  (qkv, attn_out, ffn_up, ffn_down)
//                   + 4 N^2 h                   (q.k^T and p.v over every head, non-causal)
//   merger            2 (N / m^2) ((m^2 h)^2 + m^2 h D)
// with h = hidden, F = ffn, m = merge, D = out_hidden, times depth for the blocks.
double vision_tower_flops(const VisionConfig& c, uint64_t n_patches);

struct VisionBenchOptions {
  std::vector<ImageSize> sizes;  // --image-size
  size_t chunk = 0;              // prefill tokens per step (-b); 0: each prompt in one step
  int repeat = 3;
  bool warmup = true;  // an untimed run of each size first
  bool json = false;
  std::string mmproj_path;
  ReportContext context;  // model, backend, threads, KV types (batch is set per prompt)
};

// Runs the rows. `stage` holds the whole model with the mmproj `mmproj` (StageOptions::mmproj);
// `tower_backend` is a fresh backend of the stage's kind for the tower alone. Throws
// ds::ConfigError when the model has no <|image_pad|> token.
void run_vision_bench(StageModel& stage, const ModelConfig& cfg, const GgufFile& mmproj, Backend& tower_backend,
                      const VisionBenchOptions& o);

}  // namespace ds::bench
