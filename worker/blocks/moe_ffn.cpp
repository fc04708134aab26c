#include "worker/blocks/moe_ffn.h"

namespace ds {

const float* moe_ffn(const StepContext& ctx, const MoeFfnWeights& w, const float* x, uint32_t layer) {
  Backend& be = ctx.be;
  const size_t D = ctx.cfg.n_embd, E = ctx.cfg.n_expert, k = ctx.cfg.n_expert_used, T = ctx.T;
  // The router's logits [T][E], then the shared expert's gate logits [T], in one slot (the gate's
  // rows start 256-byte aligned, as a buffer of their own would).
  const size_t gate_at = (T * E + 63) / 64 * 64;
  float* logits = ctx.ws.get(Slot::kRouter, gate_at + T);
  float* shared_gate = logits + gate_at;
  be.matmul(w.router, x, D, T, logits, E);
  be.matmul(w.shared_gate, x, D, T, shared_gate, 1);
  // The ids are int32 in a float slot: same size, and only moe_route / moe_experts touch them.
  auto* experts = reinterpret_cast<int32_t*>(ctx.ws.get(Slot::kExpertA, T * k));
  float* weights = ctx.ws.get(Slot::kExpertB, T * k);
  be.moe_route(logits, T, E, k, experts, weights);
  MoeExperts m;
  m.n_tokens = T;
  m.n_experts = E;
  m.k = k;
  m.x = x;
  m.experts = experts;
  m.weights = weights;
  m.gate_exps = w.gate_exps;
  m.up_exps = w.up_exps;
  m.down_exps = w.down_exps;
  m.shared = swiglu_ffn(ctx, w.shared, x, layer);  // swiglu_ffn's own slots (kProjA/B, kOut)
  m.shared_gate = shared_gate;
  m.y = ctx.ws.get(Slot::kExpertOut, T * D);
  be.moe_experts(m);
  tap(ctx, layer, "ffn_out", m.y, D);
  return m.y;
}

}  // namespace ds
