#include "worker/blocks/gated_delta_net.h"

namespace ds {

namespace {

// The projections' outputs a step's GDN rows start from.
struct GdnInputs {
  float* qkv;         // raw conv input [T, C]
  float* z;           // output gate [T, nv*dv]
  GdnRawGates gates;  // row t: token t's alpha / beta_raw (rows of the projections), a, dt_bias
};

// The GDN input projections of T rows: returns the raw conv input qkv [T, C], the output gate z
// [T, nv*dv] (rows of one stacked product at T == 1 when the backend stacks) and the raw gate
// rows; the gates themselves are computed by Backend::gdn_mix.
GdnInputs gdn_projections(const StepContext& ctx, const GdnWeights& w, const float* x) {
  const size_t T = ctx.T;
  Backend& be = ctx.be;
  Workspace& ws = ctx.ws;
  const ModelConfig& cfg = ctx.cfg;
  const size_t D = cfg.n_embd, C = cfg.ssm_conv_channels(), nv = cfg.ssm_dt_rank, dv = cfg.ssm_head_v_dim();
  // Stacked [alpha | beta_raw] rows of 2*nv floats.
  const auto stacked_gates = [&](const float* alpha) {
    return GdnRawGates{alpha, 2 * nv, alpha + nv, 2 * nv, w.a, w.dt_bias};
  };
  GdnInputs in{ws.get(Slot::kProjA, T * C), ws.get(Slot::kProjB, T * nv * dv), {}};
  if (w.in_proj.data != nullptr) {
    // All four stacked: [qkv ; gate ; alpha ; beta], one GEMV at one token, rows split into
    // [qkv | z | alpha | beta_raw]; alpha | beta_raw rows are read with stride 2*nv.
    float* joined = T == 1 ? ws.get(Slot::kProjA, C + nv * dv + 2 * nv) : nullptr;
    const Backend::ProjectionPart parts[] = {
        {&w.qkv, C, in.qkv}, {&w.gate, nv * dv, in.z}, {&w.alpha_beta, 2 * nv, ws.get(Slot::kAlpha, T * 2 * nv)}};
    float* out[3];
    be.project(w.in_proj, parts, 3, x, D, T, joined, /*multi_token=*/true, out);
    return {out[0], out[1], stacked_gates(out[2])};
  }
  // [qkv ; gate] stacked for the one-token GEMV only.
  float* joined = T == 1 && w.qkv_gate.data != nullptr ? ws.get(Slot::kProjA, C + nv * dv) : nullptr;
  const Backend::ProjectionPart parts[] = {{&w.qkv, C, in.qkv}, {&w.gate, nv * dv, in.z}};
  float* out[2];
  be.project(w.qkv_gate, parts, 2, x, D, T, joined, /*multi_token=*/false, out);
  in.qkv = out[0];
  in.z = out[1];
  if (w.alpha_beta.data != nullptr) {  // rows [alpha | beta_raw], read with stride 2*nv
    float* alpha = ws.get(Slot::kAlpha, T * 2 * nv);
    be.matmul(w.alpha_beta, x, D, T, alpha, 2 * nv);
    in.gates = stacked_gates(alpha);
  } else {
    float* alpha = ws.get(Slot::kAlpha, T * nv);
    float* beta_raw = ws.get(Slot::kBeta, T * nv);
    be.matmul(w.alpha, x, D, T, alpha, nv);
    be.matmul(w.beta, x, D, T, beta_raw, nv);
    in.gates = GdnRawGates{alpha, nv, beta_raw, nv, w.a, w.dt_bias};
  }
  return in;
}

}  // namespace

const float* gated_delta_net(const StepContext& ctx, const GdnWeights& w, size_t state_layer, const float* x,
                             uint32_t layer) {
  const std::vector<SeqSpan>& spans = ctx.spans;
  const size_t T = ctx.T;
  Backend& be = ctx.be;
  Workspace& ws = ctx.ws;
  const ModelConfig& cfg = ctx.cfg;
  const size_t D = cfg.n_embd, C = cfg.ssm_conv_channels(), nv = cfg.ssm_dt_rank, dv = cfg.ssm_head_v_dim();
  float* conv = ws.get(Slot::kConv, T * C);  // silu(conv) [T, C] = [q | k | v]
  float* o = ws.get(Slot::kMix, T * nv * dv);
  float* y = ws.get(Slot::kGated, T * nv * dv);
  const GdnInputs in = gdn_projections(ctx, w, x);
  BlockScratch& scratch = ctx.scratch;
  scratch.gdn_seqs.clear();
  scratch.slots.clear();
  for (const SeqSpan& s : spans) {
    scratch.gdn_seqs.push_back(GdnSeq{s.offset, s.n_tokens, s.n_draft, s.seq->slot});
    scratch.slots.push_back(s.seq->slot);
  }
  GdnBatch b;
  b.seqs = scratch.gdn_seqs.data();
  b.slots = scratch.slots.data();
  b.n_seqs = scratch.gdn_seqs.size();
  b.n_tokens = T;
  b.shape = GdnShape{T, cfg.ssm_n_group, nv, cfg.ssm_d_state, dv, C, C};
  b.conv_kernel = cfg.ssm_conv_kernel;
  b.eps = cfg.rms_eps;
  b.qkv = in.qkv;
  b.gates = in.gates;
  b.conv_weight = w.conv;
  b.states = &ctx.cache.states();
  b.layer = state_layer;
  b.conv_out = conv;
  b.g = ws.get(Slot::kGateG, T * nv);
  b.beta = ws.get(Slot::kGateBeta, T * nv);
  b.out = o;
  be.gdn_mix(b);
  be.gated_rms_norm(o, in.z, w.ssm_norm, cfg.rms_eps, T * nv, dv, y);
  tap(ctx, layer, "gdn_core", y, nv * dv);
  float* mixed = ws.get(Slot::kOut, T * D);
  be.matmul(w.out, y, nv * dv, T, mixed, D);
  tap(ctx, layer, "gdn_out", mixed, D);
  return mixed;
}

}  // namespace ds
