// The mixture-of-experts FFN of Qwen3.5 MoE (llama.cpp's qwen35moe, build_moe_ffn with softmax
// gating and renormalised top-k), as two ops:
//  * moe_route: softmax over all E experts' logits, the k most probable (lower expert index first
//    on ties), renormalised to sum to 1;
//  * moe_experts: each token's k routed SwiGLU experts from the stacked expert matrices, weighted
//    and summed in slot order, plus (optionally) the shared expert's rows scaled by the sigmoid of
//    their gate logit.
// The references the backends are held to (tests/kernels/test_moe.cpp against float64,
// tests/backend_ops/test_backend_ops_moe.cpp for the CPU and CUDA backends).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace ds::cpu {

class ThreadPool;

// logits [T][E] -> experts [T][k] (descending probability) and their weights [T][k].
// The ranking compares the logits themselves (softmax is monotone), not their rounded
// probabilities: two logits whose exps round to the same float would otherwise rank by an
// accident of the libm, and backends with different exp ulps could pick different experts. Equal
// logits (the only ties left) go to the lower index. 1 <= k <= E.
void moe_route(const float* logits, size_t n_tokens, size_t n_experts, size_t k, int32_t* experts, float* weights);

// One call of the routed experts over a step's tokens. All pointers are the backend's (device)
// memory. With D = gate_exps.cols and F = down_exps.cols, expert e's matrices are rows
// [e F, (e+1) F) of gate_exps / up_exps (F rows of D) and rows [e D, (e+1) D) of down_exps (D rows
// of F):
//   y[t] = sum_{j < k} weights[t][j] down_e(silu(gate_e x[t]) * up_e x[t])   (e = experts[t][j],
//          the sum in slot order j = 0, 1, ...)
//        + sigmoid(shared_gate[t]) shared[t]                                 (when shared is given)
struct MoeExperts {
  size_t n_tokens = 0;
  size_t n_experts = 0;                // E
  size_t k = 0;                        // slots per token
  const float* x = nullptr;            // [T][D], contiguous: the normed input rows
  const int32_t* experts = nullptr;    // [T][k] from moe_route, each in [0, E)
  const float* weights = nullptr;      // [T][k]
  WeightView gate_exps{}, up_exps{};   // E*F rows of D
  WeightView down_exps{};              // E*D rows of F
  const float* shared = nullptr;       // [T][D] the shared expert's output rows, or nullptr
  const float* shared_gate = nullptr;  // [T] their gate logits (used when shared is given)
  float* y = nullptr;                  // [T][D]; must not alias the inputs

  size_t dim() const { return gate_exps.cols; }  // D
  size_t ffn() const { return down_exps.cols; }  // F
};

// Why `m` cannot run (a sentence naming the inconsistent field), or nullptr when it can. An empty
// step (n_tokens == 0) is fine and does nothing. Expert ids are data and are checked where they are
// read (the CPU throws; device kernels skip an out-of-range slot).
inline const char* moe_experts_problem(const MoeExperts& m) {
  if (m.n_tokens == 0) return nullptr;
  if (m.n_experts == 0 || m.k == 0 || m.k > m.n_experts) return "need 1 <= k <= n_experts";
  if (m.x == nullptr || m.experts == nullptr || m.weights == nullptr || m.y == nullptr) {
    return "x, experts, weights and y must be given";
  }
  if (m.shared != nullptr && m.shared_gate == nullptr) return "shared rows need their gate logits";
  const size_t D = m.dim(), F = m.ffn();
  if (D == 0 || F == 0) return "empty expert matrices";
  if (m.up_exps.cols != D || m.gate_exps.rows != m.n_experts * F || m.up_exps.rows != m.n_experts * F) {
    return "gate_exps / up_exps must be E*F rows of D";
  }
  if (m.down_exps.rows != m.n_experts * D) return "down_exps must be E*D rows of F";
  if (m.gate_exps.type != m.up_exps.type) return "gate_exps and up_exps must share a type";
  return nullptr;
}

// The reference: per expert, its tokens' rows gathered and run through cpu::matmul (whose rows do
// not depend on the batch), so a token's result is the same however the step was batched.
// Throws std::invalid_argument for a problem above or an expert id outside [0, E).
void moe_experts(const MoeExperts& m, ThreadPool* pool);

}  // namespace ds::cpu
