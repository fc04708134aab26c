// The mixture-of-experts feed-forward block of Qwen3.5 MoE (GGUF qwen35moe, llama.cpp's
// build_moe_ffn with softmax gating and renormalised top-k): per token, the k of E routed SwiGLU
// experts its router picks (Backend::moe_route, kernels/cpu/moe.h), weighted, plus the shared
// SwiGLU expert scaled by sigmoid(x . shared_gate) (Backend::moe_experts adds it).
#pragma once

#include "worker/blocks/step_context.h"
#include "worker/blocks/swiglu_ffn.h"

namespace ds {

struct MoeFfnWeights {
  WeightView router;                         // ffn_gate_inp: E rows of D
  WeightView gate_exps, up_exps, down_exps;  // the experts stacked: E*F rows of D, E*D rows of F
  FfnWeights shared;                         // ffn_{gate,up,down}_shexp
  WeightView shared_gate;                    // ffn_gate_inp_shexp: one row of D
};

// `x`: the normed input rows [T, D] (device). Returns the output rows [T, D] (device, the
// workspace's kExpertOut slot). Everything stays on the backend's device: the router's and the
// shared gate's logits (kRouter), the route (kExpertA: expert ids, kExpertB: weights), the shared
// expert (swiglu_ffn's slots), then one moe_experts call.
const float* moe_ffn(const StepContext& ctx, const MoeFfnWeights& w, const float* x, uint32_t layer);

}  // namespace ds
