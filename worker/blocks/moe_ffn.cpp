#include "worker/blocks/moe_ffn.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/moe.h"

namespace ds {
namespace {

// Token rows routed to each expert, and the weight each gets.
struct ExpertRows {
  std::vector<uint32_t> rows;
  std::vector<float> weights;
};

std::vector<ExpertRows> route(const StepContext& ctx, const MoeFfnWeights& w, const float* x) {
  const size_t D = ctx.cfg.n_embd, E = ctx.cfg.n_expert, k = ctx.cfg.n_expert_used, T = ctx.T;
  float* logits = ctx.ws.get(Slot::kRouter, T * E);
  ctx.be.matmul(w.router, x, D, T, logits, E);
  std::vector<float> host(T * E), weights(T * k);
  std::vector<int32_t> experts(T * k);
  ctx.be.download(host.data(), logits, host.size());
  cpu::moe_route(host.data(), T, E, k, experts.data(), weights.data());
  std::vector<ExpertRows> by_expert(E);
  for (size_t t = 0; t < T; ++t) {
    for (size_t j = 0; j < k; ++j) {
      ExpertRows& e = by_expert[static_cast<size_t>(experts[t * k + j])];
      e.rows.push_back(static_cast<uint32_t>(t));
      e.weights.push_back(weights[t * k + j]);
    }
  }
  return by_expert;
}

// y[t] += sigmoid(x[t] . gate) * shared(x)[t], on the host rows y.
void add_shared_expert(const StepContext& ctx, const MoeFfnWeights& w, const float* x, uint32_t layer,
                       std::vector<float>& y) {
  const size_t D = ctx.cfg.n_embd, T = ctx.T;
  float* gate = ctx.ws.get(Slot::kRouter, T);
  ctx.be.matmul(w.shared_gate, x, D, T, gate, 1);
  std::vector<float> g(T);
  ctx.be.download(g.data(), gate, T);
  const float* shared = swiglu_ffn(ctx, w.shared, x, layer);
  std::vector<float> s(T * D);
  ctx.be.download(s.data(), shared, s.size());
  for (size_t t = 0; t < T; ++t) {
    const float scale = 1.0f / (1.0f + std::exp(-g[t]));
    for (size_t i = 0; i < D; ++i) y[t * D + i] += scale * s[t * D + i];
  }
}

}  // namespace

const float* moe_ffn(const StepContext& ctx, const MoeFfnWeights& w, const float* x, uint32_t layer) {
  Backend& be = ctx.be;
  const size_t D = ctx.cfg.n_embd, F = ctx.cfg.n_ff_exp, T = ctx.T;
  const std::vector<ExpertRows> by_expert = route(ctx, w, x);
  std::vector<float> y(T * D, 0.0f), part;
  for (size_t e = 0; e < by_expert.size(); ++e) {
    const ExpertRows& r = by_expert[e];
    const size_t n = r.rows.size();
    if (n == 0) continue;
    float* in = ctx.ws.get(Slot::kExpertIn, n * D);
    float* gate = ctx.ws.get(Slot::kExpertA, n * F);
    float* up = ctx.ws.get(Slot::kExpertB, n * F);
    float* out = ctx.ws.get(Slot::kExpertOut, n * D);
    be.gather_rows(x, r.rows.data(), n, D, in);
    be.matmul(row_range(w.gate_exps, e * F, F), in, D, n, gate, F);
    be.matmul(row_range(w.up_exps, e * F, F), in, D, n, up, F);
    be.swiglu_matmul(gate, up, n, row_range(w.down_exps, e * D, D), out, D);
    part.resize(n * D);
    be.download(part.data(), out, part.size());
    for (size_t i = 0; i < n; ++i) {
      float* yt = y.data() + size_t{r.rows[i]} * D;
      for (size_t c = 0; c < D; ++c) yt[c] += r.weights[i] * part[i * D + c];
    }
  }
  add_shared_expert(ctx, w, x, layer, y);
  float* result = ctx.ws.get(Slot::kExpertOut, T * D);
  be.upload(result, y.data(), y.size());
  tap(ctx, layer, "ffn_out", result, D);
  return result;
}

}  // namespace ds
