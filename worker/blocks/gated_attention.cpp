#include "worker/blocks/gated_attention.h"

#include <cmath>

namespace ds {

namespace {

// Each sequence attends over its cache rows through its block table; q rows are H heads of
// `q_head` floats ([query | gate] with the output gate). A step of several sequences (decode rows
// and prefill chunks mixed) is one batched call (Backend::attention_batch: the same result
// per sequence as attention_causal; on CUDA one tiled launch for the prefill chunks and one
// launch pair for the decode rows); a lone sequence calls attention_causal.
void attend(const StepContext& ctx, const void* k_pool, const void* v_pool, const float* q, size_t q_head, float* o) {
  const size_t H = ctx.cfg.n_head, Hkv = ctx.cfg.n_head_kv, d = ctx.cfg.head_dim, row = Hkv * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const KvCache& kv = ctx.cache.kv();
  const size_t block_size = kv.block_size();
  const std::vector<SeqSpan>& spans = ctx.spans;
  if (spans.size() >= 2) {
    std::vector<AttentionBatchSeq>& seqs = ctx.scratch.decode_seqs;
    seqs.clear();
    for (const SeqSpan& s : spans) {
      seqs.push_back(AttentionBatchSeq{size_t{s.start_pos} + s.n_tokens, s.offset * H * q_head, s.offset * H * d,
                                       s.seq->table.data(), s.n_tokens});
    }
    ctx.be.attention_batch(AttentionBatch{H, Hkv, d, q_head, row, k_pool, v_pool, block_size, scale, q, o, seqs.data(),
                                          seqs.size(), kv.k_type(), kv.v_type()});
    return;
  }
  for (const SeqSpan& s : spans) {
    const size_t kv_len = size_t{s.start_pos} + s.n_tokens;
    const AttentionShape shape{s.n_tokens, kv_len, H, Hkv, d, H * q_head, q_head, row, H * d};
    const KvPages pages{k_pool, v_pool, s.seq->table.data(), block_size, kv.k_type(), kv.v_type()};
    ctx.be.attention_causal(shape, q + s.offset * H * q_head, pages, scale, o + s.offset * H * d);
  }
}

}  // namespace

const float* gated_attention(const StepContext& ctx, const AttentionWeights& w, size_t kv_pool, const float* x,
                             uint32_t layer) {
  Backend& be = ctx.be;
  const ModelConfig& cfg = ctx.cfg;
  const size_t D = cfg.n_embd, H = cfg.n_head, Hkv = cfg.n_head_kv, d = cfg.head_dim, T = ctx.T;
  const bool gated = cfg.attn_output_gate;
  const size_t q_head = gated ? 2 * d : d;  // floats per head of a q row
  const size_t q_rows = H * q_head;
  float* q = ctx.ws.get(Slot::kProjA, T * q_rows);
  float* k = ctx.ws.get(Slot::kProjB, T * Hkv * d);
  float* v = ctx.ws.get(Slot::kProjC, T * Hkv * d);
  float* o = ctx.ws.get(Slot::kMix, T * H * d);
  float* y = ctx.ws.get(Slot::kGated, T * H * d);

  float* joined = T == 1 && w.qkv.data != nullptr ? ctx.ws.get(Slot::kProjA, q_rows + 2 * Hkv * d) : nullptr;
  const Backend::ProjectionPart parts[] = {{&w.q, q_rows, q}, {&w.k, Hkv * d, k}, {&w.v, Hkv * d, v}};
  float* out[3];
  be.project(w.qkv, parts, 3, x, D, T, joined, /*multi_token=*/true, out);
  q = out[0];
  k = out[1];
  v = out[2];
  // q and k heads normed and roped, and every token's K/V row written to its sequence's page
  // (one op: Backend::attention_prep); then each sequence attends over its rows through its
  // block table.
  KvCache& kv = ctx.cache.kv();
  void* k_pool = kv.k(kv_pool);
  void* v_pool = kv.v(kv_pool);
  AttentionPrep prep;
  prep.n_tokens = T;
  prep.n_heads = H;
  prep.n_kv_heads = Hkv;
  prep.head_dim = d;
  prep.qg = q;
  prep.q_head_stride = q_head;
  prep.k = k;
  prep.v = v;
  prep.q_norm = w.q_norm;
  prep.k_norm = w.k_norm;
  prep.eps = cfg.rms_eps;
  prep.n_rot = cfg.n_rot;
  prep.positions = ctx.positions;
  prep.sections = cfg.rope_sections;
  prep.theta = cfg.rope_theta;
  prep.kv_rows = ctx.kv_rows;
  prep.k_pool = k_pool;
  prep.v_pool = v_pool;
  prep.k_type = kv.k_type();
  prep.v_type = kv.v_type();
  be.attention_prep(prep);
  attend(ctx, k_pool, v_pool, q, q_head, o);
  // Values stored rotated (q4r): the output is rotated too, and H is its own inverse.
  if (kv_type_rotated(kv.v_type())) be.hadamard_heads(o, T, H * d, H, d, d);
  tap(ctx, layer, "attn_core", o, H * d);
  if (gated) be.sigmoid_gate(o, d, q + d, 2 * d, T * H, d, y, d);
  float* mixed = ctx.ws.get(Slot::kOut, T * D);
  be.matmul(w.o, gated ? y : o, H * d, T, mixed, D);
  tap(ctx, layer, "attn_out", mixed, D);
  return mixed;
}

}  // namespace ds
