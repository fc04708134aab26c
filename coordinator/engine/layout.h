// Layout planning: which contiguous layer range each pipeline stage runs. Balanced by weight
// bytes (the sum of blk.N.* tensor sizes per layer) or given explicitly by the operator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/stage_model.h"  // StageRange

namespace ds {

class GgufFile;

// Bytes of blk.N.* tensors for N in [0, n_layer) (MTP blocks after n_layer are not counted).
std::vector<uint64_t> layer_weight_bytes(const GgufFile& gguf, uint32_t n_layer);

// Splits the layers into `n_stages` non-empty contiguous ranges minimizing the largest stage's
// bytes (among equal optima, the one whose last cut is leftmost, recursively).
// Throws ds::ConfigError when n_stages is 0 or exceeds the number of layers.
std::vector<StageRange> plan_balanced_layout(const std::vector<uint64_t>& layer_bytes, uint32_t n_stages);

// "--layer-split 3,3,2": layers per stage, which must be positive and sum to n_layer.
// Throws ds::ConfigError naming the problem.
std::vector<StageRange> parse_layer_split(const std::string& spec, uint32_t n_layer);

// Layers per stage as stage ranges (counts must be positive and sum to n_layer).
std::vector<StageRange> layout_from_counts(const std::vector<uint32_t>& counts, uint32_t n_layer);

std::string describe_layout(const std::vector<StageRange>& layout);

}  // namespace ds
