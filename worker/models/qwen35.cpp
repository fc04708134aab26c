// Qwen3.5 / Qwen3.6 dense hybrid (GGUF arch `qwen35`): the hybrid stack (hybrid_stage.h) with a
// SwiGLU FFN in every block (qwen35-model-spec.md §6).
#include "worker/models/qwen35.h"

#include "common/error.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "worker/backend.h"
#include "worker/blocks/step_layout.h"
#include "worker/blocks/swiglu_ffn.h"
#include "worker/models/hybrid_stage.h"

namespace ds {
namespace {

class SwigluBlock final : public FfnBlock {
 public:
  explicit SwigluBlock(FfnWeights w) : w_(w) {}
  const float* run(const StepContext& ctx, const float* x, uint32_t layer) const override {
    return swiglu_ffn(ctx, w_, x, layer);
  }

 private:
  FfnWeights w_;
};

}  // namespace

FfnWeights bind_swiglu_ffn(Backend& be, const GgufFile& g, const std::string& gate, const std::string& up,
                           const std::string& down) {
  FfnWeights w;
  w.gate_up = stack_weights(be, g, {gate, up}, {&w.gate, &w.up});
  w.down = be.weight(g.tensor(down));
  return w;
}

std::unique_ptr<StageModel> load_qwen35_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                              StageRange range, const StageOptions& options,
                                              std::unique_ptr<Backend> backend) {
  if (config.arch != "qwen35") throw ConfigError("qwen35 stage: architecture '" + config.arch + "' is not qwen35");
  const FfnBinder swiglu = [](Backend& be, const GgufFile& g, const std::string& p) -> std::unique_ptr<FfnBlock> {
    return std::make_unique<SwigluBlock>(
        bind_swiglu_ffn(be, g, p + "ffn_gate.weight", p + "ffn_up.weight", p + "ffn_down.weight"));
  };
  return make_hybrid_stage(std::move(gguf), config, range, options, std::move(backend), swiglu);
}

}  // namespace ds
