// Qwen3.5 / Qwen3.6 mixture of experts (GGUF arch `qwen35moe`: 35B-A3B, 122B-A10B): the hybrid
// stack (hybrid_stage.h) with a routed-experts + shared-expert FFN in every block
// (worker/blocks/moe_ffn.h; decode-kv-moe-anchors.md §C).
#pragma once

#include <memory>

#include "worker/stage_model.h"

namespace ds {

class Backend;
class GgufFile;
struct ModelConfig;

std::unique_ptr<StageModel> load_qwen35moe_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                                 StageRange range, const StageOptions& options,
                                                 std::unique_ptr<Backend> backend);

}  // namespace ds
