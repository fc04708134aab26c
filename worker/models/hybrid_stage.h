// The Qwen3.5 / Qwen3.6 hybrid stack shared by the architectures built on it: Gated DeltaNet and
// gated attention blocks, the MTP block on the last stage, the LM head (worker/models/
// hybrid_stage.cpp). What differs between them is the FFN of each block: the architecture's file
// binds it (qwen35.cpp: a SwiGLU FFN; qwen35moe.cpp: routed experts plus a shared expert).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "worker/blocks/step_context.h"
#include "worker/stage_model.h"

namespace ds {

class Backend;
class GgufFile;
struct ModelConfig;

// The FFN of one decoder block (the MTP block's too), bound to its tensors.
class FfnBlock {
 public:
  virtual ~FfnBlock() = default;
  // `x`: the normed input rows [T, D] (device); returns the output rows [T, D] (device, a
  // workspace slot valid until the next block runs).
  virtual const float* run(const StepContext& ctx, const float* x, uint32_t layer) const = 0;
};

// Binds the FFN of the block whose tensors are named `prefix` ("blk.N.").
using FfnBinder = std::function<std::unique_ptr<FfnBlock>(Backend&, const GgufFile&, const std::string& prefix)>;

std::unique_ptr<StageModel> make_hybrid_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                              StageRange range, const StageOptions& options,
                                              std::unique_ptr<Backend> backend, FfnBinder bind_ffn);

}  // namespace ds
