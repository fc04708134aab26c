// The SwiGLU feed-forward block: down(silu(gate(x)) * up(x)) (qwen35-model-spec.md §6).
#pragma once

#include "worker/blocks/step_context.h"

namespace ds {

struct FfnWeights {
  WeightView gate, up, down;
  WeightView gate_up;  // stacked [gate ; up] when the backend stacks (gate and up are then row ranges of it)
};

// `x`: the normed input rows [T, D] (device). Returns the output rows [T, D] (device, the
// workspace's kOut slot).
const float* swiglu_ffn(const StepContext& ctx, const FfnWeights& w, const float* x, uint32_t layer);

}  // namespace ds
