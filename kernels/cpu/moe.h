// The router of a mixture-of-experts FFN (Qwen3.5 MoE, llama.cpp's qwen35moe): softmax over all
// E experts' logits, the k largest probabilities (lower expert index first on ties), renormalised
// to sum to 1. The reference the backends route with (tests/kernels/test_moe.cpp checks it
// against float64).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds::cpu {

// logits [T][E] -> experts [T][k] (descending probability) and their weights [T][k].
void moe_route(const float* logits, size_t n_tokens, size_t n_experts, size_t k, int32_t* experts, float* weights);

}  // namespace ds::cpu
