#include "worker/blocks/swiglu_ffn.h"

namespace ds {

const float* swiglu_ffn(const StepContext& ctx, const FfnWeights& w, const float* x, uint32_t layer) {
  Backend& be = ctx.be;
  const size_t D = ctx.cfg.n_embd, F = w.down.cols, T = ctx.T;  // ffn_down's cols: the FFN size
  float* gate = ctx.ws.get(Slot::kProjA, T * F);
  float* up = ctx.ws.get(Slot::kProjB, T * F);
  float* down = ctx.ws.get(Slot::kOut, T * D);
  float* joined = T == 1 && w.gate_up.data != nullptr ? ctx.ws.get(Slot::kProjA, 2 * F) : nullptr;
  const Backend::ProjectionPart parts[] = {{&w.gate, F, gate}, {&w.up, F, up}};
  float* out[2];
  be.project(w.gate_up, parts, 2, x, D, T, joined, /*multi_token=*/true, out);
  be.swiglu_matmul(out[0], out[1], T, w.down, down, D);  // cols of ffn_down = F
  tap(ctx, layer, "ffn_out", down, D);
  return down;
}

}  // namespace ds
