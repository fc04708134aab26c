// The memory stage 0's vision tower (--mmproj) takes beside the pools, so the loader sets it
// aside before sizing them (worker/daemon/stage_loader.cpp). Pure arithmetic over the mmproj's
// tensors and keys, like pool_sizing.h, so the rule is tested on its own.
//
// What is counted, for the largest image the coordinator sends (Assign.image_max_tokens, T tokens
// of merge^2 patches each, N = T * merge^2 patches), in the memory the pools come from (the
// device on cuda, RAM on cpu):
//  - weights: the matrices as the backend holds them (cuda: a device copy of each; cpu: none, the
//    mapping is read in place, as the model's own weights), every small tensor as an f32 copy,
//    the two patch-embedding taps as one f32 matrix; on cpu also the host f32 position grid;
//  - workspace: one encode() call of N patches (the tower's scratch, VisionTower::workspace_floats
//    in worker/models/qwen35_vision.h: pixels, residual, norm, qkv, attention and MLP rows) and its
//    rope positions; on cpu also the host rows the call is made of (patch floats, position rows,
//    the step's RGB pixels as received and copied). The embedder makes one tower call per image,
//    so however many images a step brings, no call holds more than N patches;
//  - encodings: the embedder's cache of encoded images (worker/blocks/image_embedder.h
//    ImageCacheLimits: at most max_images of T tokens and at most max_bytes), plus the one being
//    encoded while the cache is full. The embedder keeps to that within a step too: it writes a
//    new encoding's rows into the step as soon as it is made and caches it only within the limits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds {

class GgufFile;
struct VisionConfig;

// serve's default --image-max-tokens, taken when Assign.image_max_tokens is 0.
inline constexpr uint32_t kDefaultImageMaxTokens = 4096;

struct TowerMemoryInputs {
  uint32_t n_embd = 0;            // the text model's hidden size (one encoded token's floats)
  uint32_t max_image_tokens = 0;  // T above (0: kDefaultImageMaxTokens)
  bool device_copies = false;     // cuda: matrices are copied to the device, host buffers are not counted
  size_t cache_max_images = 0;    // the embedder's cache limits (ImageCacheLimits)
  size_t cache_max_bytes = 0;
};

struct TowerMemory {
  uint64_t weight_bytes = 0;
  uint64_t workspace_bytes = 0;  // one encode() of the largest image
  uint64_t encoding_bytes = 0;   // the encodings kept
  uint64_t total() const { return weight_bytes + workspace_bytes + encoding_bytes; }
};

// `vision` is read_vision_config(mmproj) (worker/models/qwen35_vision.h checks the tensors'
// shapes when the tower is built; here only their element counts and bytes are read).
TowerMemory vision_tower_memory(const GgufFile& mmproj, const VisionConfig& vision, const TowerMemoryInputs& in);

}  // namespace ds
