// The composite ops' defaults (Backend::project, Backend::gdn_mix): the dispatch by batch shape,
// over the backend's own ops (so the CUDA backend's overrides of those ops run under the same
// dispatch and keep their bits).
#include <stdexcept>
#include <vector>

#include "worker/backend.h"
#include "worker/cache/state_pool.h"

namespace ds {

namespace {

// Pieces a sequence's GDN rows run in: one piece up to and including the first verify row,
// then one per further verify row, so the state after each can be captured (capture = the
// capture index after the piece, -1 = none). Single-token pieces are what plain decoding
// runs, so on CPU a verified token's state is bit-identical to decoding it alone.
struct GdnPiece {
  size_t offset, n_tokens;
  int capture;
};

std::vector<GdnPiece> gdn_pieces(const GdnSeq& s) {
  if (s.n_draft == 0) return {{s.offset, s.n_tokens, -1}};
  std::vector<GdnPiece> out{{s.offset, s.n_tokens - s.n_draft, 0}};
  for (size_t j = 1; j <= s.n_draft; ++j) {  // verify row j sits at n_tokens - 1 - n_draft + j
    out.push_back({s.offset + s.n_tokens - 1 - s.n_draft + j, 1, j < s.n_draft ? static_cast<int>(j) : -1});
  }
  return out;
}

// A speculative verify row: one token, then its drafts.
bool is_verify_row(const GdnSeq& s) {
  return s.n_draft > 0 && s.n_tokens == s.n_draft + 1;
}

bool all_verify_rows(const GdnBatch& b) {
  for (size_t i = 0; i < b.n_seqs; ++i) {
    if (!is_verify_row(b.seqs[i])) return false;
  }
  return b.n_seqs > 0;
}

// Plain decode: every sequence is one token (no drafts) and sequence i sits at row i.
bool one_row_per_seq(const GdnBatch& b) {
  for (size_t i = 0; i < b.n_seqs; ++i) {
    const GdnSeq& s = b.seqs[i];
    if (s.n_tokens != 1 || s.offset != i || s.n_draft != 0) return false;
  }
  return true;
}

// `r`'s rows from row `first` on.
GdnRawGates raw_gate_rows(const GdnRawGates& r, size_t first) {
  return GdnRawGates{r.alpha + first * r.alpha_stride,
                     r.alpha_stride,
                     r.beta_raw + first * r.beta_stride,
                     r.beta_stride,
                     r.a,
                     r.dt_bias};
}

// A plain decode step: every sequence's conv and recurrence in one launch each (the recurrence
// computes the gates from their raw rows itself), states addressed by their pool slot.
void decode_all(Backend& be, const GdnBatch& b) {
  const GdnShape& sh = b.shape;
  const size_t C = sh.qk_token_stride, nk = sh.n_k_heads, dk = sh.dk;
  StatePool& st = *b.states;
  be.conv_silu_l2_slots(b.qkv, C, b.conv_weight, b.conv_kernel, st.conv(0, b.layer), st.record_floats(), b.slots,
                        b.n_seqs, 2 * nk, dk, b.eps, b.conv_out);
  GdnShape token_shape = sh;
  token_shape.n_tokens = 1;
  const float* q = b.conv_out;
  be.gdn_decode_slots(token_shape, q, q + nk * dk, q + 2 * nk * dk, b.gates, st.ssm(0, b.layer), st.record_floats(),
                      b.slots, b.n_seqs, b.out);
}

// The conv and recurrence piece by piece (prefill chunks, verify rows with their state captures,
// mixed steps): one launch per piece. g / beta: every row's gates, or null when every sequence
// is a verify row (their recurrences compute the gates from b.gates themselves).
void piece_by_piece(Backend& be, const GdnBatch& b, bool single_tokens, const float* g, const float* beta) {
  const GdnShape& sh = b.shape;
  const size_t C = sh.qk_token_stride, nk = sh.n_k_heads, nv = sh.n_v_heads, dk = sh.dk, dv = sh.dv;
  const size_t Kc = b.conv_kernel, gl = b.layer, T = b.n_tokens;
  const float* qkv = b.qkv;
  float* conv = b.conv_out;
  float* o = b.out;
  StatePool& st = *b.states;
  for (size_t i = 0; i < b.n_seqs; ++i) {
    const GdnSeq& s = b.seqs[i];
    if (single_tokens && is_verify_row(s)) {
      // A verify row (one token, then its drafts): its pieces' fused conv in one pass that
      // captures the window after each of its first n_draft tokens (Backend::conv_silu_l2_captured).
      be.conv_silu_l2_captured(qkv + s.offset * C, C, s.n_tokens, b.conv_weight, Kc, st.conv(s.slot, gl), 2 * nk, dk,
                               b.eps, conv + s.offset * C, s.n_draft, st.capture_layer(s.slot, 0, gl),
                               st.record_floats());
      continue;
    }
    for (const GdnPiece& p : gdn_pieces(s)) {
      if (single_tokens) {
        be.conv_silu_l2_token(qkv + p.offset * C, C, b.conv_weight, Kc, st.conv(s.slot, gl), 2 * nk, dk, b.eps,
                              conv + p.offset * C);
      } else {
        be.causal_conv1d_silu(qkv + p.offset * C, C, p.n_tokens, C, b.conv_weight, Kc, st.conv(s.slot, gl),
                              conv + p.offset * C);
      }
      if (p.capture >= 0) st.capture_conv(s.slot, static_cast<uint32_t>(p.capture), gl);
    }
  }
  // Otherwise L2-normalize every q and k head in place: the 2*nk heads of a token are contiguous
  // rows of dk, so short steps take one launch per token instead of one per head.
  if (single_tokens) {
    // normalized by conv_silu_l2_token above
  } else if (T < 2 * nk) {
    for (size_t t = 0; t < T; ++t) be.l2_norm(conv + t * C, dk, b.eps, 2 * nk, dk, conv + t * C, dk);
  } else {
    be.l2_norm_heads(conv, C, T, 2 * nk, dk, b.eps);
  }
  for (size_t i = 0; i < b.n_seqs; ++i) {
    const GdnSeq& s = b.seqs[i];
    if (is_verify_row(s)) {
      // A verify row (one token, then its drafts): one pass that captures the state after each
      // of its first n_draft tokens, the pieces' bits (Backend::gdn_captured).
      const float* q = conv + s.offset * C;
      const GdnShape shape{s.n_tokens, nk, nv, dk, dv, C, C};
      float* state = st.ssm(s.slot, gl);
      float* captures = st.capture_ssm_at(s.slot, 0, gl);
      if (g == nullptr) {
        be.gdn_captured(shape, q, q + nk * dk, q + 2 * nk * dk, raw_gate_rows(b.gates, s.offset), state,
                        o + s.offset * nv * dv, s.n_draft, captures, st.record_floats());
      } else {
        be.gdn_captured(shape, q, q + nk * dk, q + 2 * nk * dk, g + s.offset * nv, beta + s.offset * nv, state,
                        o + s.offset * nv * dv, s.n_draft, captures, st.record_floats());
      }
      continue;
    }
    for (const GdnPiece& p : gdn_pieces(s)) {
      const float* q = conv + p.offset * C;
      const GdnShape shape{p.n_tokens, nk, nv, dk, dv, C, C};
      be.gdn(shape, q, q + nk * dk, q + 2 * nk * dk, g + p.offset * nv, beta + p.offset * nv, st.ssm(s.slot, gl),
             o + p.offset * nv * dv);
      if (p.capture >= 0) st.capture_ssm(s.slot, static_cast<uint32_t>(p.capture), gl);
    }
  }
}

}  // namespace

void Backend::project(const WeightView& stack, const ProjectionPart* parts, size_t n, const float* x, size_t x_stride,
                      size_t n_tokens, float* joined, bool multi_token, float** where) {
  if (stack.data != nullptr && n_tokens == 1) {  // one GEMV; its row splits into the parts'
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) where[i] = joined + total, total += parts[i].rows;
    matmul(stack, x, x_stride, 1, joined, total);
    return;
  }
  if (stack.data != nullptr && multi_token && stacks_multi_token(n_tokens)) {  // one pass, rows to each part
    RowOutput outs[8];
    if (n > 8) throw std::invalid_argument("project: at most 8 parts");
    for (size_t i = 0; i < n; ++i) outs[i] = {parts[i].rows, parts[i].out, parts[i].rows}, where[i] = parts[i].out;
    matmul_rows(stack, x, x_stride, n_tokens, outs, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    matmul(*parts[i].w, x, x_stride, n_tokens, parts[i].out, parts[i].rows);
    where[i] = parts[i].out;
  }
}

void Backend::gdn_mix(const GdnBatch& b) {
  // Conv for all rows, then the recurrence: each captures its own state after every piece.
  // When every piece is one token, conv + SiLU + the q/k L2 norms go together
  // (conv_silu_l2_token); a plain decode step runs all its sequences at once.
  bool single_tokens = true;
  for (size_t i = 0; i < b.n_seqs; ++i) {
    for (const GdnPiece& p : gdn_pieces(b.seqs[i])) single_tokens = single_tokens && p.n_tokens == 1;
  }
  if (single_tokens && one_row_per_seq(b)) {
    decode_all(*this, b);
  } else if (all_verify_rows(b)) {  // speculation alone: the gates inside each row's recurrence launch
    piece_by_piece(*this, b, single_tokens, nullptr, nullptr);
  } else {
    const GdnRawGates& r = b.gates;
    gdn_gates(r.alpha, r.alpha_stride, r.beta_raw, r.beta_stride, r.a, r.dt_bias, b.n_tokens, b.shape.n_v_heads, b.g,
              b.beta);
    piece_by_piece(*this, b, single_tokens, b.g, b.beta);
  }
}

}  // namespace ds
