// The compute backend a model runs on: device memory plus one launcher per op, with the
// same contracts as the reference kernels in kernels/cpu/*.h. Pointers passed to ops are
// device pointers of this backend; small control arrays (token ids, positions) are host
// arrays the backend uploads itself. The CPU backend calls kernels/cpu directly; the CUDA
// backend calls the twins in kernels/cuda.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/host_signal.h"
#include "common/logit_adjust.h"
#include "common/sampling.h"
#include "common/token_mask.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_prep.h"
#include "kernels/cpu/attention_segments.h"
#include "kernels/cpu/gdn.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/moe.h"

namespace ds {

struct GgufTensor;
class StatePool;
using cpu::AttentionBatch;
using cpu::AttentionBatchSeq;
using cpu::AttentionPrep;
using cpu::AttentionShape;
using cpu::GdnRawGates;
using cpu::GdnShape;
using cpu::GeluKind;
using cpu::KvPages;
using cpu::MoeExperts;
using cpu::SegmentAttention;
using cpu::WeightView;

// One sequence's rows of a Gated DeltaNet step (Backend::gdn_mix).
struct GdnSeq {
  size_t offset = 0;  // first row in the step
  size_t n_tokens = 0;
  uint32_t n_draft = 0;  // trailing drafts: a speculative verify row when n_tokens == n_draft + 1
  uint32_t slot = 0;     // its state slot
};

// One Gated DeltaNet layer's token mixing over a step: causal conv + SiLU and the q/k L2 norms
// (`conv_out` = [q | k | v] rows), the gates, and the delta-rule recurrence on every sequence's
// state slot into `out`, with the per-token state captures a speculative verify row needs for
// rollback; any mix of prefill chunks, decode tokens and verify rows.
struct GdnBatch {
  const GdnSeq* seqs = nullptr;
  const uint32_t* slots = nullptr;  // host: seqs[i].slot
  size_t n_seqs = 0;
  size_t n_tokens = 0;  // rows of the step
  GdnShape shape;       // heads and dims; n_tokens unused
  size_t conv_kernel = 0;
  float eps = 0;                       // of the L2 norms
  const float* qkv = nullptr;          // [T, C] the raw conv input (C = shape.qk_token_stride)
  GdnRawGates gates;                   // row t: token t's alpha / beta_raw, and a, dt_bias
  const float* conv_weight = nullptr;  // [C][Kc]
  StatePool* states = nullptr;         // the stage's state slots
  size_t layer = 0;                    // the layer's place in a slot
  float* conv_out = nullptr;           // [T, C]
  float* g = nullptr;                  // [T, nv] scratch for the gates
  float* beta = nullptr;               // [T, nv] scratch for the gates
  float* out = nullptr;                // [T, nv * dv]
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ---- memory (floats on the backend's device) ----------------------------------------------
  virtual float* alloc(size_t n_floats) = 0;  // zero-filled; throws on failure
  virtual void release(float* p) = 0;
  virtual void upload(float* dst, const float* host_src, size_t n) = 0;
  virtual void download(float* host_dst, const float* src, size_t n) = 0;
  // download() that may return before the bytes land: `done` is set once they are in host_dst
  // (a device sets it from its stream, after the copy). Until then host_dst must stay mapped
  // and the caller must synchronize() before reusing host buffers that queued work reads.
  virtual void download_signalled(float* host_dst, const float* src, size_t n, const HostSignal& done) {
    download(host_dst, src, n);
    done.set();
  }
  // Orders the work queued after this call behind `ready` (host memory another process or
  // device sets): a device waits on it in its stream; the default blocks this thread.
  virtual void wait_host_signal(const HostSignal& ready) { ready.wait(); }
  virtual void copy(float* dst, const float* src, size_t n) = 0;
  virtual void zero(float* dst, size_t n) = 0;
  // A weight matrix in its GGUF type, resident on the device (CPU: the mmap itself).
  virtual WeightView weight(const GgufTensor& t) = 0;
  // One device matrix of `parts` stacked row-wise (same type and width), so products that share
  // an input run as one matmul; each part is a row range of it (its rows are not uploaded a
  // second time). Empty view (data == nullptr) when the backend cannot or need not (the CPU
  // backend reads the file mapping in place): the caller keeps the separate matrices.
  virtual WeightView weight_stack(const GgufTensor* const* /*parts*/, size_t /*n_parts*/) { return {}; }
  // A small tensor (norm gains, conv taps, biases) as f32 on the device; lives with the backend.
  virtual const float* f32_tensor(const GgufTensor& t) = 0;

  // ---- ops ------------------------------------------------------------------------------------
  virtual void embed_rows(const WeightView& table, const int32_t* host_ids, size_t n, float* out) = 0;
  virtual void matmul(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, float* y,
                      size_t y_stride) = 0;
  // A stacked matrix's product whose rows go to separate outputs: outs[i].rows rows (in order; they
  // add up to w.rows) to outs[i].y with token stride outs[i].ys. Default: one product per output on
  // its row range of w (the CPU reference); a backend may write all of them in one pass.
  struct RowOutput {
    size_t rows;
    float* y;
    size_t ys;
  };
  virtual void matmul_rows(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, const RowOutput* outs,
                           size_t n_outs) {
    size_t first = 0;
    for (size_t i = 0; i < n_outs; ++i) {
      matmul(cpu::row_range(w, first, outs[i].rows), x, x_stride, n_tokens, outs[i].y, outs[i].ys);
      first += outs[i].rows;
    }
  }
  // Whether steps of n_tokens tokens should run the stacked matrices (weight_stack) through
  // matmul_rows instead of one product per part. Single-token steps always do.
  virtual bool stacks_multi_token(size_t /*n_tokens*/) const { return false; }
  virtual void rms_norm(const float* x, size_t x_stride, const float* w, float eps, size_t n_rows, size_t dim, float* y,
                        size_t y_stride) = 0;
  virtual void gated_rms_norm(const float* o, const float* z, const float* w, float eps, size_t n_rows, size_t dim,
                              float* y) = 0;
  virtual void l2_norm(const float* x, size_t x_stride, float eps, size_t n_rows, size_t dim, float* y,
                       size_t y_stride) = 0;
  // In place, the L2 norm of n_heads heads of `dim` floats per token, contiguous inside token rows
  // `token_stride` apart (the GDN q and k heads). Default: one l2_norm per head (the CPU
  // reference); the CUDA backend runs them all in one launch.
  virtual void l2_norm_heads(float* x, size_t token_stride, size_t n_tokens, size_t n_heads, size_t dim, float eps) {
    for (size_t h = 0; h < n_heads; ++h) {
      l2_norm(x + h * dim, token_stride, eps, n_tokens, dim, x + h * dim, token_stride);
    }
  }
  virtual void rope_neox(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride,
                         size_t head_dim, size_t n_rot, const int32_t* host_positions, std::array<int32_t, 4> sections,
                         float theta) = 0;
  virtual void causal_conv1d_silu(const float* x, size_t x_stride, size_t n_tokens, size_t channels,
                                  const float* weight, size_t kernel, float* state, float* y) = 0;
  // g = a * softplus(alpha + dt_bias), beta = sigmoid(beta_raw); inputs [n_tokens, nv] with row
  // strides alpha_stride / beta_stride, outputs [n_tokens, nv] contiguous.
  virtual void gdn_gates(const float* alpha, size_t alpha_stride, const float* beta_raw, size_t beta_stride,
                         const float* a, const float* dt_bias, size_t n_tokens, size_t nv, float* g, float* beta) = 0;
  // One token of a GDN front end: causal_conv1d_silu of x [channels] (state updated), then the
  // first n_norm_heads heads of head_dim channels of y L2-normalized in place. Default: the two
  // ops (the CPU reference); backends may fuse them.
  virtual void conv_silu_l2_token(const float* x, size_t channels, const float* weight, size_t kernel, float* state,
                                  size_t n_norm_heads, size_t head_dim, float eps, float* y) {
    causal_conv1d_silu(x, channels, 1, channels, weight, kernel, state, y);
    l2_norm(y, head_dim, eps, n_norm_heads, head_dim, y, head_dim);
  }
  // A speculative verify row's front end: conv_silu_l2_token over n_tokens tokens (rows of x / y,
  // `channels` apart) that also leaves the window after token c < n_captures in captures + c *
  // capture_stride floats (what a rollback restores). Default: token by token with a copy after
  // each captured token (the CPU reference); backends may do it in one pass with the same bits.
  virtual void conv_silu_l2_captured(const float* x, size_t channels, size_t n_tokens, const float* weight,
                                     size_t kernel, float* state, size_t n_norm_heads, size_t head_dim, float eps,
                                     float* y, size_t n_captures, float* captures, size_t capture_stride) {
    for (size_t t = 0; t < n_tokens; ++t) {
      conv_silu_l2_token(x + t * channels, channels, weight, kernel, state, n_norm_heads, head_dim, eps,
                         y + t * channels);
      if (t < n_captures) copy(captures + t * capture_stride, state, (kernel - 1) * channels);
    }
  }
  virtual void gdn(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                   float* state, float* out) = 0;
  // A speculative verify row's recurrence: gdn() over s.n_tokens tokens that also leaves the state
  // after token c (c < n_captures <= s.n_tokens) in captures + c * capture_stride floats, the
  // per-position states a rollback restores. Default: token by token through gdn(), a copy after
  // each captured token (what plain decoding runs; the CPU reference); backends may do it in one
  // pass with the same bits.
  virtual void gdn_captured(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                            const float* beta, float* state, float* out, size_t n_captures, float* captures,
                            size_t capture_stride) {
    GdnShape one = s;
    one.n_tokens = 1;
    const size_t state_floats = s.n_v_heads * s.dk * s.dv;
    for (size_t t = 0; t < s.n_tokens; ++t) {
      gdn(one, q + t * s.qk_token_stride, k + t * s.qk_token_stride, v + t * s.v_token_stride, g + t * s.n_v_heads,
          beta + t * s.n_v_heads, state, out + t * s.n_v_heads * s.dv);
      if (t < n_captures) copy(captures + t * capture_stride, state, state_floats);
    }
  }
  // The same with token t's gates computed from row t of `gates` instead of given as g / beta.
  // Default: gdn_gates into temporaries, then the form above (the CPU reference); a backend may
  // compute them inside the recurrence's launch, with the same bits.
  virtual void gdn_captured(const GdnShape& s, const float* q, const float* k, const float* v, const GdnRawGates& gates,
                            float* state, float* out, size_t n_captures, float* captures, size_t capture_stride) {
    const size_t n_gates = s.n_tokens * s.n_v_heads;
    const std::unique_ptr<float, ScratchRelease> g(alloc(2 * n_gates), ScratchRelease{this});
    float* beta = g.get() + n_gates;
    gdn_gates(gates.alpha, gates.alpha_stride, gates.beta_raw, gates.beta_stride, gates.a, gates.dt_bias, s.n_tokens,
              s.n_v_heads, g.get(), beta);
    gdn_captured(s, q, k, v, g.get(), beta, state, out, n_captures, captures, capture_stride);
  }
  // Decode steps of n_seqs sequences, one token each (rows 0..n_seqs-1 of the inputs and
  // outputs), whose states live in one pool: sequence i's at state0 + host_slots[i] * slot_stride
  // floats. Defaults: the one-sequence ops in a loop; backends may run all sequences at once.
  virtual void conv_silu_l2_slots(const float* x, size_t channels, const float* weight, size_t kernel, float* state0,
                                  size_t slot_stride, const uint32_t* host_slots, size_t n_seqs, size_t n_norm_heads,
                                  size_t head_dim, float eps, float* y) {
    for (size_t i = 0; i < n_seqs; ++i) {
      conv_silu_l2_token(x + i * channels, channels, weight, kernel, state0 + host_slots[i] * slot_stride, n_norm_heads,
                         head_dim, eps, y + i * channels);
    }
  }
  // s.n_tokens == 1; q / k rows at s.qk_token_stride, v at s.v_token_stride, g / beta at n_v_heads.
  virtual void gdn_decode_slots(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                                const float* beta, float* state0, size_t slot_stride, const uint32_t* host_slots,
                                size_t n_seqs, float* out) {
    for (size_t i = 0; i < n_seqs; ++i) {
      gdn(s, q + i * s.qk_token_stride, k + i * s.qk_token_stride, v + i * s.v_token_stride, g + i * s.n_v_heads,
          beta + i * s.n_v_heads, state0 + host_slots[i] * slot_stride, out + i * s.n_v_heads * s.dv);
    }
  }
  // The same step with the gates computed from their raw inputs (row i of `gates` is sequence i's)
  // instead of given as g / beta. Default: gdn_gates into temporaries, then the form above (the
  // CPU reference); a backend may compute them inside the recurrence's launch, with the same bits.
  virtual void gdn_decode_slots(const GdnShape& s, const float* q, const float* k, const float* v,
                                const GdnRawGates& gates, float* state0, size_t slot_stride, const uint32_t* host_slots,
                                size_t n_seqs, float* out) {
    const size_t n_gates = n_seqs * s.n_v_heads;
    const std::unique_ptr<float, ScratchRelease> g(alloc(2 * n_gates), ScratchRelease{this});
    float* beta = g.get() + n_gates;
    gdn_gates(gates.alpha, gates.alpha_stride, gates.beta_raw, gates.beta_stride, gates.a, gates.dt_bias, n_seqs,
              s.n_v_heads, g.get(), beta);
    gdn_decode_slots(s, q, k, v, g.get(), beta, state0, slot_stride, host_slots, n_seqs, out);
  }
  // ---- composite ops: one per concept, the dispatch by batch shape in one place ---------------
  // (defaults in worker/backend_composite.cpp, over the backend's own ops)
  // One input times several matrices that share it (`n` parts of rows[i] rows each, outputs
  // outs[i] with row stride rows[i]); `stack` is the parts stacked row-wise (data == nullptr:
  // none). At one token with a stack: its single GEMV into `joined` (room for the sum of the
  // rows), and the parts' outputs are consecutive slices of it; with a stack, `multi_token` and
  // Backend::stacks_multi_token(T): one pass writing each part's rows (matmul_rows); otherwise one
  // product per part. Returns where each part's rows are in `where`.
  struct ProjectionPart {
    const WeightView* w;
    size_t rows;
    float* out;
  };
  virtual void project(const WeightView& stack, const ProjectionPart* parts, size_t n, const float* x, size_t x_stride,
                       size_t n_tokens, float* joined, bool multi_token, float** where);
  // Gated DeltaNet token mixing (GdnBatch). Default (worker/backend_composite.cpp): a plain decode
  // step runs every sequence in one launch of each fused op (conv_silu_l2_slots, gdn_decode_slots
  // with the gates inside); verify rows alone compute their gates inside each recurrence launch;
  // anything else computes the gates once, then runs conv and recurrence piece by piece
  // (prefill chunks, verify rows with their captures). Each path keeps a token's bits
  // independent of the batch, and the CPU backend's fallbacks are the token-by-token reference.
  virtual void gdn_mix(const GdnBatch& b);

  // Paged KV: `kv` holds device pool pointers and a HOST block table (uploaded by the backend).
  virtual void attention_causal(const AttentionShape& s, const float* q, const KvPages& kv, float scale,
                                float* out) = 0;
  // A step's attention: b.n_seqs sequences of n_q_tokens query tokens each, decode rows and
  // prefill chunks mixed (HOST block tables, as above). Default: attention_causal per sequence
  // (the CPU reference); the CUDA backend runs the prefill chunks in one tiled launch and the
  // one-token rows in one launch pair, with the same bits per sequence as attention_causal.
  virtual void attention_batch(const AttentionBatch& b) {
    for (size_t i = 0; i < b.n_seqs; ++i) {
      attention_causal(cpu::batch_seq_shape(b, i), b.q + b.seqs[i].q_offset, cpu::batch_seq_pages(b, i), b.scale,
                       b.out + b.seqs[i].out_offset);
    }
  }
  // An attention layer's q/k prep and KV write (kernels/cpu/attention_prep.h): q and k heads
  // RMS-normed then roped in place, rotated for a rotated K type (and v for a rotated V type), k
  // and v rows encoded into their pool rows. Default: the separate ops (the CPU reference); the
  // CUDA backend runs it as one launch with the same bits. std::invalid_argument for an
  // inconsistent shape.
  virtual void attention_prep(const AttentionPrep& p) {
    if (const char* why = cpu::attention_prep_problem(p)) {
      throw std::invalid_argument(std::string("attention_prep: ") + why);
    }
    if (p.n_tokens == 0) return;
    const size_t T = p.n_tokens, H = p.n_heads, Hkv = p.n_kv_heads, d = p.head_dim, qs = p.q_head_stride;
    const size_t row = p.kv_row_floats();
    rms_norm(p.qg, qs, p.q_norm, p.eps, T * H, d, p.qg, qs);
    rms_norm(p.k, d, p.k_norm, p.eps, T * Hkv, d, p.k, d);
    rope_neox(p.qg, T, H * qs, H, qs, d, p.n_rot, p.positions, p.sections, p.theta);
    rope_neox(p.k, T, row, Hkv, d, d, p.n_rot, p.positions, p.sections, p.theta);
    if (kv_type_rotated(p.k_type)) {
      hadamard_heads(p.qg, T, H * qs, H, qs, d);
      hadamard_heads(p.k, T, row, Hkv, d, d);
    }
    if (kv_type_rotated(p.v_type)) hadamard_heads(p.v, T, row, Hkv, d, d);
    kv_write(p.k_type, p.k, p.kv_rows, T, row, p.k_pool);
    kv_write(p.v_type, p.v, p.kv_rows, T, row, p.v_pool);
  }
  // The KV write: src rows [n_rows][n] (contiguous) encoded as type t into pool rows
  // host_rows[i] (distinct; kernels/cpu/kv_codec.h kv_write_rows).
  virtual void kv_write(KvType t, const float* src, const uint32_t* host_rows, size_t n_rows, size_t n, void* pool) = 0;
  // In place: the normalised Hadamard rotation of each head (kernels/cpu/kv_codec.h): q4r's
  // queries, keys and values before the write, and attention's output after it.
  virtual void hadamard_heads(float* x, size_t n_rows, size_t row_stride, size_t n_heads, size_t head_stride,
                              size_t head_dim) = 0;
  virtual void swiglu(const float* gate, const float* up, size_t n, float* y) = 0;
  // The FFN's SwiGLU and down projection: y = w (silu(gate) * up), gate and up [n_rows][w.cols]
  // contiguous; `gate` may be overwritten. Default: the two ops (the CPU reference); the CUDA
  // backend rounds the product straight into its bf16 GEMM operand in prefill steps.
  virtual void swiglu_matmul(float* gate, const float* up, size_t n_rows, const WeightView& w, float* y,
                             size_t y_stride) {
    swiglu(gate, up, n_rows * w.cols, gate);
    matmul(w, gate, w.cols, n_rows, y, y_stride);
  }
  virtual void sigmoid_gate(const float* x, size_t x_stride, const float* gate, size_t gate_stride, size_t n_rows,
                            size_t dim, float* y, size_t y_stride) = 0;
  virtual void add_inplace(float* y, const float* x, size_t n) = 0;
  // ---- mixture of experts (kernels/cpu/moe.h; every pointer on the device) --------------------
  // The router: logits [n_tokens][n_experts] -> experts [n_tokens][k] (int32) and their
  // renormalised weights [n_tokens][k].
  virtual void moe_route(const float* logits, size_t n_tokens, size_t n_experts, size_t k, int32_t* experts,
                         float* weights) = 0;
  // A step's routed experts plus the sigmoid-gated shared expert's rows (cpu::MoeExperts), with no
  // host round trip. std::invalid_argument for an inconsistent shape (moe_experts_problem).
  virtual void moe_experts(const MoeExperts& m) = 0;
  // The residual step: x += delta, then y = rms_norm(x; w) (rows contiguous, y != x). Default:
  // the two ops (the CPU reference); backends may fuse them into one pass.
  virtual void add_rms_norm(float* x, const float* delta, const float* w, float eps, size_t n_rows, size_t dim,
                            float* y) {
    add_inplace(x, delta, n_rows * dim);
    rms_norm(x, dim, w, eps, n_rows, dim, y, dim);
  }
  // ---- encoder ops (the vision tower, worker/models/qwen35_vision.h) --------------------------
  // Same contracts as their kernels/cpu twins: layer_norm (norm.h), gelu and add_bias
  // (activation.h), rope_2d (rope.h; positions are host arrays), attention_segments
  // (attention_segments.h; a.starts is a host array).
  virtual void layer_norm(const float* x, size_t x_stride, const float* w, const float* b, float eps, size_t n_rows,
                          size_t dim, float* y, size_t y_stride) = 0;
  virtual void gelu(GeluKind kind, const float* x, size_t n, float* y) = 0;
  virtual void add_bias(float* y, size_t y_stride, size_t n_rows, size_t dim, const float* bias) = 0;
  virtual void rope_2d(float* x, size_t n_tokens, size_t token_stride, size_t n_heads, size_t head_stride,
                       size_t head_dim, const int32_t* host_positions, float theta) = 0;
  virtual void attention_segments(const SegmentAttention& a) = 0;
  // Copies rows: dst[i] = src[rows[i]] (row length `dim`, host row indices).
  virtual void gather_rows(const float* src, const uint32_t* host_rows, size_t n_rows, size_t dim, float* dst) = 0;
  virtual void synchronize() = 0;
  // Applies host `edits` (common/sampling.h: penalties, logit_bias, masks) to the logits rows
  // [n_rows, n_vocab] on the device, before they are digested or downloaded. Throws
  // std::invalid_argument for an edit outside the block.
  virtual void edit_logits(float* logits, size_t n_rows, size_t n_vocab, const LogitEdit* edits, size_t n_edits) = 0;
  // Applies grammar masks (common/token_mask.h: host masks of some rows) to the logits rows
  // [n_rows, n_vocab] on the device, after the edits: a disallowed id becomes -inf. Throws
  // std::invalid_argument for masks that do not fit the block (check_token_masks).
  virtual void mask_logits(float* logits, size_t n_rows, size_t n_vocab, const TokenMasks& masks) = 0;

  // Digests logits rows [n_rows, n_vocab] (device) where they are, downloading only the
  // digests (out[0, n_rows)); same values as ds::digest_logits up to the log-sum-exp's
  // summation order. Returns false, doing nothing, when this backend cannot (the default; the
  // CPU backend's logits are already on the host) or a row's rule needs the whole sorted row.
  virtual bool digest_logits_rows(const float* /*logits*/, size_t /*n_rows*/, size_t /*n_vocab*/,
                                  const DigestRequest* /*requests*/, LogitDigest* /*out*/) {
    return false;
  }

 private:
  // Releases a temporary of alloc() when it goes out of scope (default ops that need scratch).
  struct ScratchRelease {
    Backend* backend;
    void operator()(float* p) const { backend->release(p); }
  };
};

// CPU backend over kernels/cpu with `n_threads` worker threads.
std::unique_ptr<Backend> make_cpu_backend(int n_threads);

}  // namespace ds
