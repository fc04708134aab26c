// A random-weight Qwen3.5 vision tower (mmproj GGUF, llama.cpp's converter layout, projector
// "qwen3vl_merger") for benchmarks and loading tests without a checkpoint: the keys and tensors
// worker/models/qwen35_vision.h reads, matrices and conv taps in F16 as `--mmproj --outtype f16`
// writes them, biases, norms and the position grid in F32 (as the tiny fixture's mmproj has them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/synth/generate.h"
#include "tools/synth/shapes.h"

namespace ds::synth {

struct MmprojShape {
  std::string name;         // "mmproj-9b", "mmproj-tiny", ...
  uint32_t depth = 0;       // blocks
  uint32_t hidden = 0;      // the tower's width
  uint32_t heads = 0;       // attention heads (head_dim = hidden / heads, a multiple of 4)
  uint32_t ffn = 0;         // the blocks' MLP width
  uint32_t patch = 16;      // P: pixels per patch side
  uint32_t merge = 2;       // merge x merge patches per LLM token
  uint32_t pos_side = 48;   // the learned position grid is pos_side x pos_side (2304 rows)
  uint32_t out_hidden = 0;  // the merger's output: the text model's hidden size
  float eps = 1e-6f;        // LayerNorm epsilon
  uint64_t n_params() const;
};

// Whether `name` names an mmproj shape ("mmproj-<text shape>").
bool is_mmproj_shape(const std::string& name);

// "mmproj-<text>" for a Qwen3.5 text shape of shape_by_name (0.8b, 2b, 4b, 9b, 27b, 35b-a3b,
// 122b-a10b): the Qwen3.5 tower as HF's Qwen3_5VisionConfig defaults give it (depth 27, hidden
// 1152, 16 heads, MLP 4304, patch 16, merge 2, 48 x 48 position grid; the same tower for every
// size is UNVERIFIED for the smaller ones) projecting to that text shape's hidden size.
// "mmproj-tiny": the tiny VL fixture's tower (depth 2, hidden 64, 4 heads, MLP 128, 8 x 8 grid)
// projecting to the "tiny" text shape's 64. Throws ds::ConfigError for any other name.
MmprojShape mmproj_shape_by_name(const std::string& name);

// Every tensor of the tower, in the converter's order.
std::vector<TensorPlan> plan_mmproj_tensors(const MmprojShape& s);

// Writes the mmproj to `path` (see write_planned for seed and threads). Throws ds::FormatError on
// I/O failure.
SynthSummary write_synth_mmproj(const MmprojShape& shape, const std::string& path, uint64_t seed, int threads);

}  // namespace ds::synth
