// Layout planning: which contiguous layer range each pipeline stage runs. Balanced by the weight
// bytes a decode step streams on each stage (the sum of blk.N.* tensor sizes per layer, and on
// the last stage the LM head it also runs) or given explicitly by the operator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/stage_footprint.h"  // layer_weight_bytes: the per-layer bytes balanced here
#include "common/stage_types.h"

namespace ds {

class GgufFile;

// Bytes the last stage streams per decode step besides its layers: the LM head (output.weight,
// or token_embd.weight when the embeddings are tied) and output_norm, once per step; with MTP
// speculation (`spec_k` drafts per step) also each draft's pass through the MTP block
// (blk.<n_layer>.*) and the LM head again. Why it matters: the 9B's LM head is ~4 layers' worth,
// so splitting by layers alone leaves the last of two stages ~25% more work than the first.
uint64_t last_stage_extra_bytes(const GgufFile& gguf, uint32_t n_layer, uint32_t spec_k, uint32_t draft_vocab = 0);

// Splits the layers into `n_stages` non-empty contiguous ranges minimizing the largest stage's
// bytes, the last stage counting `last_stage_extra` more (among equal optima, the one whose last
// cut is leftmost, recursively). Throws ds::ConfigError when n_stages is 0 or exceeds the number
// of layers.
std::vector<StageRange> plan_balanced_layout(const std::vector<uint64_t>& layer_bytes, uint32_t n_stages,
                                             uint64_t last_stage_extra = 0);

// "--layer-split 3,3,2": layers per stage, which must be positive and sum to n_layer.
// Throws ds::ConfigError naming the problem.
std::vector<StageRange> parse_layer_split(const std::string& spec, uint32_t n_layer);

// Layers per stage as stage ranges (counts must be positive and sum to n_layer).
std::vector<StageRange> layout_from_counts(const std::vector<uint32_t>& counts, uint32_t n_layer);

std::string describe_layout(const std::vector<StageRange>& layout);

}  // namespace ds
