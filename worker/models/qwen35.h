// Qwen3.5 / Qwen3.6 dense hybrid (GGUF arch `qwen35`): Gated DeltaNet and gated attention blocks
// with SwiGLU FFNs, the MTP block on the last stage (worker/models/qwen35.cpp on hybrid_stage.h).
#pragma once

#include <memory>
#include <string>

#include "worker/blocks/swiglu_ffn.h"
#include "worker/stage_model.h"

namespace ds {

class Backend;
class GgufFile;
struct ModelConfig;

std::unique_ptr<StageModel> load_qwen35_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                              StageRange range, const StageOptions& options,
                                              std::unique_ptr<Backend> backend);

// A SwiGLU FFN's three matrices, gate and up stacked where the backend stacks (stack_weights).
FfnWeights bind_swiglu_ffn(Backend& be, const GgufFile& g, const std::string& gate, const std::string& up,
                           const std::string& down);

}  // namespace ds
