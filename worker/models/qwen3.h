// Dense Qwen3 (GGUF arch `qwen3`): RMSNorm blocks of GQA attention (per-head q/k RMSNorm, NEOX
// RoPE over the whole head, no output gate) and SwiGLU FFNs. The last stage ends in one of three
// heads (StageOptions::head): the LM head (chat models), none (embedding models: the final-normed
// rows) or the classifier (rerankers: cls.output, or the LM-head rows of the label tokens).
#pragma once

#include <memory>

#include "worker/stage_model.h"

namespace ds {

class Backend;
class GgufFile;
struct ModelConfig;

std::unique_ptr<StageModel> load_qwen3_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                             StageRange range, const StageOptions& options,
                                             std::unique_ptr<Backend> backend);

}  // namespace ds
