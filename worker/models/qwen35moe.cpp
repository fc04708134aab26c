#include "worker/models/qwen35moe.h"

#include "common/error.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "worker/backend.h"
#include "worker/blocks/moe_ffn.h"
#include "worker/models/hybrid_stage.h"
#include "worker/models/qwen35.h"

namespace ds {
namespace {

class MoeBlock final : public FfnBlock {
 public:
  explicit MoeBlock(MoeFfnWeights w) : w_(w) {}
  const float* run(const StepContext& ctx, const float* x, uint32_t layer) const override {
    return moe_ffn(ctx, w_, x, layer);
  }

 private:
  MoeFfnWeights w_;
};

std::unique_ptr<FfnBlock> bind_moe(Backend& be, const GgufFile& g, const std::string& p) {
  const auto w = [&](const char* name) { return be.weight(g.tensor(p + name)); };
  MoeFfnWeights m;
  m.router = w("ffn_gate_inp.weight");
  m.gate_exps = w("ffn_gate_exps.weight");
  m.up_exps = w("ffn_up_exps.weight");
  m.down_exps = w("ffn_down_exps.weight");
  m.shared =
      bind_swiglu_ffn(be, g, p + "ffn_gate_shexp.weight", p + "ffn_up_shexp.weight", p + "ffn_down_shexp.weight");
  m.shared_gate = w("ffn_gate_inp_shexp.weight");
  return std::make_unique<MoeBlock>(m);
}

}  // namespace

std::unique_ptr<StageModel> load_qwen35moe_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                                 StageRange range, const StageOptions& options,
                                                 std::unique_ptr<Backend> backend) {
  if (config.arch != "qwen35moe" || !config.moe()) {
    throw ConfigError("qwen35moe stage: architecture '" + config.arch + "' is not qwen35moe");
  }
  return make_hybrid_stage(std::move(gguf), config, range, options, std::move(backend), bind_moe);
}

}  // namespace ds
