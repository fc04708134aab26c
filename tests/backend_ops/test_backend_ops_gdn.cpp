// test_backend_ops cases of the attention and Gated DeltaNet ops (bounds: test_backend_ops.cpp's
// header), and the CPU self-consistency check of gdn_mix (a mixed batch == every token decoded
// alone, bit for bit, its verify rows' captures == the states after those tokens).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "common/ggml_types.h"
#include "tests/backend_ops/backend_ops_cases.h"
#include "tests/kernels/decode_batch_util.h"
#include "worker/cache/state_pool.h"

namespace ds::backend_ops {
namespace {

constexpr float kEps = 1e-6f;
constexpr double kRowTol = 2e-6, kGdnTol = 2e-5, kTcTol = 4e-3, kAttnTol = 2e-5, kDecodeAttnTol = 1e-5;
const char* const kRowWhy = "f32 conv/norm/gates: reduction order, expf ulps (test_cuda_fused.cpp)";
const char* const kGdnWhy = "f32 recurrence, 8 partial sums a column (test_cuda_gdn.cpp, test_cuda_gdn_slots.cpp)";
const char* const kGdnTcWhy = "bf16 mode: chunked prefill on tf32 tensor cores (test_cuda_gdn_chunked.cpp kTcTol)";

// ---- attention ----------------------------------------------------------------------------------

Case attention_causal_case(size_t n_q, size_t past, size_t d) {
  return {"attention_causal",
          std::to_string(n_q) + " queries after " + std::to_string(past) + " d=" + std::to_string(d),
          [=](Backend& be, const Target& target) {
            Rng rng(600 + n_q + past + d);
            const size_t H = 4, Hkv = 2, bs = 16, kv_len = past + n_q, n_blocks = (kv_len + bs - 1) / bs;
            const size_t pool_blocks = n_blocks + 5, row = Hkv * d;
            std::vector<int32_t> table;
            for (uint32_t b : distinct(rng, n_blocks, pool_blocks)) table.push_back(static_cast<int32_t>(b));
            Dev dv(be);
            std::vector<float> k = rng.vec(pool_blocks * bs * row, -2, 2), v = rng.vec(k.size(), -2, 2);
            std::vector<float> q = rng.vec(n_q * H * 2 * d, -2, 2);
            float scale = 1.0f / std::sqrt(static_cast<float>(d));
            const bool tc = target.bf16_prefill && n_q >= 16;
            if (tc && std::string(be.name()) == "cpu") {
              // The reference of the tensor-core prefill (test_cuda_attention_prefill.cpp): the CPU
              // attention on the operands it rounds, bf16(q * scale), bf16(K), bf16(V), scale 1.
              for (float& x : q) x = bf16_to_fp32(fp32_to_bf16(x * scale));
              for (float& x : k) x = bf16_to_fp32(fp32_to_bf16(x));
              for (float& x : v) x = bf16_to_fp32(fp32_to_bf16(x));
              scale = 1.0f;
            }
            float* out = dv.alloc(n_q * H * d);
            const AttentionShape s{n_q, kv_len, H, Hkv, d, H * 2 * d, 2 * d, row, H * d};
            be.attention_causal(s, dv.put(q), KvPages{dv.put(k), dv.put(v), table.data(), bs}, scale, out);
            return Outs{rel("out", dv.get(out, n_q * H * d), tc ? kTcTol : kAttnTol,
                            tc ? "bf16 mode prefill on tensor cores vs the CPU on its bf16 operands "
                                 "(test_cuda_attention_prefill.cpp kTcTol)"
                               : "f32 online softmax (test_cuda_attention_prefill.cpp kTol)")};
          }};
}

Case attention_batch_case(std::vector<size_t> kv_lens) {
  std::string shape = std::to_string(kv_lens.size()) + " seqs kv";
  for (size_t l : kv_lens) shape += " " + std::to_string(l);
  return {"attention_batch", shape, [=](Backend& be, const Target&) {
            Rng rng(610 + kv_lens.size());
            const cpu::test::DecodeBatchHost b = cpu::test::make_decode_batch(rng, 8, 2, 128, kv_lens, 40);
            Dev d(be);
            // Zero-filled, not the sentinel: a huge sentinel would dominate max|ref| in the metric.
            float* out = d.alloc(b.n_rows() * b.out_row());
            be.attention_batch(b.batch(d.put(b.q), out, d.put(b.k_pool), d.put(b.v_pool)));
            return Outs{rel("out", d.get(out, b.n_rows() * b.out_row()), kDecodeAttnTol,
                            "f32 decode attention (test_cuda_attention_batch.cpp kAttentionTol); spare row stays 0")};
          }};
}

// A step mixing decode rows, a few-token row and prefill chunks (some prefix-cached) in one
// attention_batch call. In the bf16 mode the CPU reference runs the prefill chunks on the
// operands the tensor-core kernel rounds (as attention_causal_case) and the rest unrounded.
Case attention_step_case(std::vector<size_t> kv_lens, std::vector<size_t> n_qs) {
  std::string shape = std::to_string(kv_lens.size()) + " seqs q/kv";
  for (size_t i = 0; i < kv_lens.size(); ++i) shape += " " + std::to_string(n_qs[i]) + "/" + std::to_string(kv_lens[i]);
  return {"attention_batch", shape, [=](Backend& be, const Target& target) {
            Rng rng(630 + kv_lens.size());
            cpu::test::DecodeBatchHost b = cpu::test::make_decode_batch(rng, 8, 4, 128, kv_lens, 200, 16, n_qs);
            Dev d(be);
            float* out = d.alloc(b.n_rows() * b.out_row());  // zero-filled (see attention_batch_case)
            const bool tc = target.bf16_prefill;
            if (!tc || std::string(be.name()) != "cpu") {
              be.attention_batch(b.batch(d.put(b.q), out, d.put(b.k_pool), d.put(b.v_pool)));
            } else {
              const std::vector<AttentionBatchSeq> all = b.seqs;
              cpu::test::DecodeBatchHost r = b;
              for (float& x : r.q) x = bf16_to_fp32(fp32_to_bf16(x * b.scale));
              for (float& x : r.k_pool) x = bf16_to_fp32(fp32_to_bf16(x));
              for (float& x : r.v_pool) x = bf16_to_fp32(fp32_to_bf16(x));
              r.scale = 1.0f;
              for (const bool tiled : {true, false}) {
                cpu::test::DecodeBatchHost& on = tiled ? r : b;
                on.seqs.clear();
                for (const AttentionBatchSeq& s : all) {
                  if ((s.n_q_tokens >= 16) == tiled) on.seqs.push_back(s);
                }
                be.attention_batch(on.batch(d.put(on.q), out, d.put(on.k_pool), d.put(on.v_pool)));
              }
            }
            return Outs{rel("out", d.get(out, b.n_rows() * b.out_row()), tc ? kTcTol : kAttnTol,
                            tc ? "bf16 mode: prefill chunks on tensor cores vs the CPU on their bf16 operands "
                                 "(test_cuda_attention_prefill.cpp kTcTol)"
                               : "f32 tiled prefill and decode attention (test_cuda_attention_prefill.cpp kTol)")};
          }};
}

Case attention_prep_case(size_t T, size_t d, size_t n_rot, std::array<int32_t, 4> sections) {
  return {"attention_prep", std::to_string(T) + " tokens d=" + std::to_string(d) + " rot=" + std::to_string(n_rot),
          [=](Backend& be, const Target&) {
            Rng rng(620 + T + d);
            const size_t H = 4, Hkv = 2, qs = 2 * d, row = Hkv * d, pool_rows = 3 * T + 5;
            std::vector<int32_t> pos(3 * T);
            for (auto& p : pos) p = rng.integer(0, 3000);
            const std::vector<uint32_t> kv_rows = distinct(rng, T, pool_rows);
            Dev dv(be);
            AttentionPrep p;
            p.n_tokens = T, p.n_heads = H, p.n_kv_heads = Hkv, p.head_dim = d;
            p.qg = dv.put(rng.vec(T * H * qs, -2, 2)), p.q_head_stride = qs;
            p.k = dv.put(rng.vec(T * row, -2, 2)), p.v = dv.put(rng.vec(T * row, -2, 2));
            p.q_norm = dv.put(rng.vec(d, 0.5f, 1.5f)), p.k_norm = dv.put(rng.vec(d, 0.5f, 1.5f));
            p.eps = kEps, p.n_rot = n_rot, p.positions = pos.data(), p.sections = sections, p.theta = 1e7f;
            p.kv_rows = kv_rows.data();
            p.k_pool = dv.put(rng.vec(pool_rows * row)), p.v_pool = dv.put(rng.vec(pool_rows * row));
            be.attention_prep(p);
            const char* why = "norm + rope: reduction order, cos/sin ulps (test_cuda_attention_prep.cpp kCpuTol)";
            return Outs{
                rel("qg", dv.get(p.qg, T * H * qs), kRowTol, why), rel("k", dv.get(p.k, T * row), kRowTol, why),
                rel("k_pool", dv.get(static_cast<const float*>(p.k_pool), pool_rows * row), kRowTol, why),
                bits("v_pool", dv.get(static_cast<const float*>(p.v_pool), pool_rows * row), "v rows are copied")};
          }};
}

// ---- Gated DeltaNet -----------------------------------------------------------------------------

struct GdnDims {
  size_t nk, nv, dk, dv, kc;
  size_t C() const { return 2 * nk * dk + nv * dv; }
  size_t window() const { return (kc - 1) * C(); }
  size_t state() const { return nv * dk * dv; }
  GdnShape shape(size_t T) const { return GdnShape{T, nk, nv, dk, dv, C(), C()}; }
  std::string str() const {
    return "nk" + std::to_string(nk) + " nv" + std::to_string(nv) + " dk" + std::to_string(dk) + " dv" +
           std::to_string(dv);
  }
};
const GdnDims kDims[] = {{2, 4, 64, 64, 4}, {1, 3, 32, 32, 4}};

// T conv rows [q | k | v] with the q and k heads L2-normalized (what the recurrence is fed).
std::vector<float> qkv_rows(Rng& rng, size_t T, const GdnDims& g) {
  std::vector<float> r = rng.vec(T * g.C());
  for (size_t t = 0; t < T; ++t) {
    for (size_t h = 0; h < 2 * g.nk; ++h) {
      float* x = &r[t * g.C() + h * g.dk];
      double s = 0;
      for (size_t i = 0; i < g.dk; ++i) s += double(x[i]) * x[i];
      for (size_t i = 0; i < g.dk; ++i) x[i] = static_cast<float>(x[i] / std::sqrt(s + 1e-6));
    }
  }
  return r;
}

// Raw gate rows [T][alpha | beta_raw] with a and dt_bias, on the device.
struct RawGates {
  float *rows, *a, *dt;
  size_t nv;
  GdnRawGates view(size_t first = 0) const {
    return {rows + first * 2 * nv, 2 * nv, rows + first * 2 * nv + nv, 2 * nv, a, dt};
  }
};
RawGates raw_gates(Dev& d, Rng& rng, size_t T, size_t nv) {
  return {d.put(rng.vec(T * 2 * nv, -4, 4)), d.put(rng.vec(nv, -3.0f, -0.1f)), d.put(rng.vec(nv)), nv};
}

Case conv1d_case(size_t T, const GdnDims& g) {
  return {"causal_conv1d_silu", std::to_string(T) + " tokens C=" + std::to_string(g.C()),
          [=](Backend& be, const Target&) {
            Rng rng(700 + T + g.C());
            const size_t C = g.C(), xs = C + 5;
            Dev d(be);
            const float *x = d.put(rng.vec(T * xs, -2, 2)), *w = d.put(rng.vec(C * g.kc));
            float* state = d.put(rng.vec(g.window(), -2, 2));
            float* y = d.alloc(T * C);
            be.causal_conv1d_silu(x, xs, T, C, w, g.kc, state, y);
            return Outs{rel("y", d.get(y, T * C), kRowTol, kRowWhy),
                        bits("state", d.get(state, g.window()), "shifted inputs")};
          }};
}

Case gates_case(size_t T, size_t nv) {
  return {"gdn_gates", std::to_string(T) + " tokens nv=" + std::to_string(nv), [=](Backend& be, const Target&) {
            Rng rng(710 + T + nv);
            const size_t as = nv + 3, bs = 2 * nv + 1;
            Dev d(be);
            const float *alpha = d.put(rng.vec(T * as, -30, 30)), *beta_raw = d.put(rng.vec(T * bs, -6, 6));
            const float *a = d.put(rng.vec(nv, -3.0f, -0.1f)), *dt = d.put(rng.vec(nv));
            float *gg = d.alloc(T * nv), *beta = d.alloc(T * nv);
            be.gdn_gates(alpha, as, beta_raw, bs, a, dt, T, nv, gg, beta);
            return Outs{rel("g", d.get(gg, T * nv), kRowTol, "softplus: expf / log1pf ulps"),
                        rel("beta", d.get(beta, T * nv), kRowTol, "sigmoid: expf ulps")};
          }};
}

Case conv_token_case(const GdnDims& g) {
  return {
      "conv_silu_l2_token", g.str(), [=](Backend& be, const Target&) {
        Rng rng(720 + g.C());
        const size_t C = g.C();
        Dev d(be);
        const float *x = d.put(rng.vec(C, -2, 2)), *w = d.put(rng.vec(C * g.kc));
        float* state = d.put(rng.vec(g.window(), -2, 2));
        float* y = d.alloc(C);
        be.conv_silu_l2_token(x, C, w, g.kc, state, 2 * g.nk, g.dk, kEps, y);
        return Outs{rel("y", d.get(y, C), kRowTol, kRowWhy), bits("state", d.get(state, g.window()), "shifted inputs")};
      }};
}

Case conv_captured_case(const GdnDims& g, size_t T, size_t n_cap) {
  return {"conv_silu_l2_captured", g.str() + " T=" + std::to_string(T) + " captures=" + std::to_string(n_cap),
          [=](Backend& be, const Target&) {
            Rng rng(730 + g.C() + T);
            const size_t C = g.C(), cs = g.window() + 40;
            Dev d(be);
            const float *x = d.put(rng.vec(T * C, -2, 2)), *w = d.put(rng.vec(C * g.kc));
            float *state = d.put(rng.vec(g.window(), -2, 2)), *caps = d.put(rng.vec(4 * cs)), *y = d.alloc(T * C);
            be.conv_silu_l2_captured(x, C, T, w, g.kc, state, 2 * g.nk, g.dk, kEps, y, n_cap, caps, cs);
            return Outs{rel("y", d.get(y, T * C), kRowTol, kRowWhy),
                        bits("state", d.get(state, g.window()), "shifted inputs"),
                        bits("captures", d.get(caps, 4 * cs), "window copies; the rest untouched")};
          }};
}

Case conv_slots_case(const GdnDims& g, std::vector<uint32_t> slots) {
  return {"conv_silu_l2_slots", g.str() + " " + std::to_string(slots.size()) + " seqs",
          [=](Backend& be, const Target&) {
            Rng rng(740 + g.C() + slots.size());
            const size_t C = g.C(), n = slots.size(), stride = g.window() + 99, pool = 8;
            Dev d(be);
            const float *x = d.put(rng.vec(n * C, -2, 2)), *w = d.put(rng.vec(C * g.kc));
            float *states = d.put(rng.vec(pool * stride, -2, 2)), *y = d.alloc(n * C);
            be.conv_silu_l2_slots(x, C, w, g.kc, states, stride, slots.data(), n, 2 * g.nk, g.dk, kEps, y);
            return Outs{rel("y", d.get(y, n * C), kRowTol, kRowWhy),
                        bits("states", d.get(states, pool * stride), "shifted inputs; other slots untouched")};
          }};
}

Case gdn_case(size_t T, const GdnDims& g) {
  return {"gdn", g.str() + " T=" + std::to_string(T), [=](Backend& be, const Target& target) {
            Rng rng(750 + T + g.C());
            Dev d(be);
            const float* q = d.put(qkv_rows(rng, T, g));
            const float *gg = d.put(rng.vec(T * g.nv, -1, 0)), *beta = d.put(rng.vec(T * g.nv, 0, 1));
            float *state = d.put(rng.vec(g.state(), -0.1f, 0.1f)), *out = d.alloc(T * g.nv * g.dv);
            be.gdn(g.shape(T), q, q + g.nk * g.dk, q + 2 * g.nk * g.dk, gg, beta, state, out);
            const bool tc = target.bf16_prefill && T >= 32;
            const double tol = tc ? kTcTol : kGdnTol;
            return Outs{rel("out", d.get(out, T * g.nv * g.dv), tol, tc ? kGdnTcWhy : kGdnWhy),
                        rel("state", d.get(state, g.state()), tol, tc ? kGdnTcWhy : kGdnWhy)};
          }};
}

Case gdn_captured_case(const GdnDims& g, size_t T, size_t n_cap, bool raw) {
  return {"gdn_captured", std::string(raw ? "raw gates " : "g/beta ") + g.str() + " T=" + std::to_string(T),
          [=](Backend& be, const Target&) {
            Rng rng(760 + T + g.C() + raw);
            const size_t cs = g.state() + 40;
            Dev d(be);
            const float* q = d.put(qkv_rows(rng, T, g));
            const RawGates rg = raw_gates(d, rng, T, g.nv);
            const float *gg = d.put(rng.vec(T * g.nv, -1, 0)), *beta = d.put(rng.vec(T * g.nv, 0, 1));
            float *state = d.put(rng.vec(g.state(), -0.1f, 0.1f)), *caps = d.put(rng.vec(4 * cs));
            float* out = d.alloc(T * g.nv * g.dv);
            const float *k = q + g.nk * g.dk, *v = q + 2 * g.nk * g.dk;
            if (raw) {
              be.gdn_captured(g.shape(T), q, k, v, rg.view(), state, out, n_cap, caps, cs);
            } else {
              be.gdn_captured(g.shape(T), q, k, v, gg, beta, state, out, n_cap, caps, cs);
            }
            return Outs{rel("out", d.get(out, T * g.nv * g.dv), kGdnTol, kGdnWhy),
                        rel("state", d.get(state, g.state()), kGdnTol, kGdnWhy),
                        rel("captures", d.get(caps, 4 * cs), kGdnTol, kGdnWhy)};
          }};
}

Case gdn_slots_case(const GdnDims& g, std::vector<uint32_t> slots, bool raw) {
  return {"gdn_decode_slots",
          std::string(raw ? "raw gates " : "g/beta ") + g.str() + " " + std::to_string(slots.size()) + " seqs",
          [=](Backend& be, const Target&) {
            Rng rng(770 + g.C() + slots.size() + raw);
            const size_t n = slots.size(), stride = g.state() + 64, pool = 8;
            Dev d(be);
            const float* q = d.put(qkv_rows(rng, n, g));
            const RawGates rg = raw_gates(d, rng, n, g.nv);
            const float *gg = d.put(rng.vec(n * g.nv, -1, 0)), *beta = d.put(rng.vec(n * g.nv, 0, 1));
            float *states = d.put(rng.vec(pool * stride, -0.1f, 0.1f)), *out = d.alloc(n * g.nv * g.dv);
            const float *k = q + g.nk * g.dk, *v = q + 2 * g.nk * g.dk;
            if (raw) {
              be.gdn_decode_slots(g.shape(1), q, k, v, rg.view(), states, stride, slots.data(), n, out);
            } else {
              be.gdn_decode_slots(g.shape(1), q, k, v, gg, beta, states, stride, slots.data(), n, out);
            }
            return Outs{rel("out", d.get(out, n * g.nv * g.dv), kGdnTol, kGdnWhy),
                        rel("states", d.get(states, pool * stride), kGdnTol, kGdnWhy)};
          }};
}

// ---- gdn_mix ------------------------------------------------------------------------------------

constexpr size_t kLayers = 2, kLayer = 1, kSlots = 8;

// One gdn_mix step's host inputs.
struct MixStep {
  GdnDims g;
  std::vector<GdnSeq> seqs;
  std::vector<uint32_t> slots;
  size_t T = 0;
  std::vector<float> qkv, gate_rows, a, dt, conv_w, pool_init;
};

MixStep make_mix(const GdnDims& g, std::vector<GdnSeq> seqs, uint64_t seed) {
  MixStep m{g, std::move(seqs), {}, 0, {}, {}, {}, {}, {}, {}};
  for (const GdnSeq& s : m.seqs) m.slots.push_back(s.slot), m.T = std::max(m.T, s.offset + s.n_tokens);
  Rng rng(seed);
  m.qkv = rng.vec(m.T * g.C(), -2, 2);
  m.gate_rows = rng.vec(m.T * 2 * g.nv, -4, 4);
  m.a = rng.vec(g.nv, -3.0f, -0.1f);
  m.dt = rng.vec(g.nv);
  m.conv_w = rng.vec(g.C() * g.kc);
  m.pool_init.resize(kSlots * kLayers * (g.window() + g.state()));
  for (size_t r = 0; r < kSlots * kLayers; ++r) {  // conv windows O(1), states small
    float* rec = m.pool_init.data() + r * (g.window() + g.state());
    for (size_t i = 0; i < g.window(); ++i) rec[i] = rng.uniform(-2, 2);
    for (size_t i = 0; i < g.state(); ++i) rec[g.window() + i] = rng.uniform(-0.1f, 0.1f);
  }
  return m;
}

// The device side of a step: inputs uploaded, outputs allocated, a state pool initialized.
struct MixRun {
  Dev& d;
  const MixStep& m;
  StatePool pool;
  float *qkv, *gates, *a, *dt, *conv_w, *conv_out, *g, *beta, *out;
  MixRun(Dev& dev, const MixStep& step) : d(dev), m(step), pool(dev.be, kLayers, step.g.window(), step.g.state()) {
    pool.reserve_slots(kSlots);
    pool.reserve_captures(kSlots);
    d.be.upload(pool.conv(0, 0), m.pool_init.data(), m.pool_init.size());
    qkv = d.put(m.qkv), gates = d.put(m.gate_rows), a = d.put(m.a), dt = d.put(m.dt), conv_w = d.put(m.conv_w);
    conv_out = d.alloc(m.T * m.g.C()), g = d.alloc(m.T * m.g.nv), beta = d.alloc(m.T * m.g.nv);
    out = d.alloc(m.T * m.g.nv * m.g.dv);
  }
  // A batch over rows [first, ...) of the buffers.
  GdnBatch batch(const GdnSeq* seqs, const uint32_t* slots, size_t n_seqs, size_t n_tokens, size_t first = 0) {
    GdnBatch b;
    b.seqs = seqs, b.slots = slots, b.n_seqs = n_seqs, b.n_tokens = n_tokens;
    b.shape = m.g.shape(n_tokens), b.conv_kernel = m.g.kc, b.eps = kEps;
    const size_t C = m.g.C(), nv = m.g.nv;
    b.qkv = qkv + first * C;
    b.gates = GdnRawGates{gates + first * 2 * nv, 2 * nv, gates + first * 2 * nv + nv, 2 * nv, a, dt};
    b.conv_weight = conv_w, b.states = &pool, b.layer = kLayer;
    b.conv_out = conv_out + first * C, b.g = g + first * nv, b.beta = beta + first * nv;
    b.out = out + first * nv * m.g.dv;
    return b;
  }
  void run_all() { d.be.gdn_mix(batch(m.seqs.data(), m.slots.data(), m.seqs.size(), m.T)); }
  std::vector<float> slot_records() { return d.get(pool.conv(0, 0), kSlots * pool.record_floats()); }
  std::vector<float> capture_records() {
    return d.get(pool.capture_layer(0, 0, 0), kSlots * StatePool::kMaxCaptures * pool.record_floats());
  }
};

// Splits records [n][layers][conv | ssm] into their conv and ssm parts.
void split_records(const std::vector<float>& recs, const GdnDims& g, std::vector<float>* conv,
                   std::vector<float>* ssm) {
  const size_t per = g.window() + g.state();
  for (size_t r = 0; r < recs.size() / per; ++r) {
    conv->insert(conv->end(), recs.begin() + r * per, recs.begin() + r * per + g.window());
    ssm->insert(ssm->end(), recs.begin() + r * per + g.window(), recs.begin() + (r + 1) * per);
  }
}

Case gdn_mix_case(std::string what, const GdnDims& g, std::vector<GdnSeq> seqs) {
  return {"gdn_mix", what + " " + g.str(), [=](Backend& be, const Target& target) {
            const MixStep m = make_mix(g, seqs, 800 + seqs.size() + g.C());
            Dev d(be);
            MixRun r(d, m);
            r.run_all();
            bool tc = false;  // a prefill piece of >= 32 tokens runs chunked on tensor cores in the bf16 mode
            for (const GdnSeq& s : m.seqs) tc = tc || (s.n_tokens > s.n_draft + 1 && s.n_tokens - s.n_draft >= 32);
            tc = tc && target.bf16_prefill;
            const double tol = tc ? kTcTol : kGdnTol;
            const char* why = tc ? kGdnTcWhy : kGdnWhy;
            std::vector<float> slot_conv, slot_ssm, cap_conv, cap_ssm;
            split_records(r.slot_records(), g, &slot_conv, &slot_ssm);
            split_records(r.capture_records(), g, &cap_conv, &cap_ssm);
            return Outs{rel("out", d.get(r.out, m.T * g.nv * g.dv), tol, why),
                        rel("conv_out", d.get(r.conv_out, m.T * g.C()), kRowTol, kRowWhy),
                        rel("g", d.get(r.g, m.T * g.nv), kRowTol, kRowWhy),
                        rel("beta", d.get(r.beta, m.T * g.nv), kRowTol, kRowWhy),
                        bits("slot conv windows", slot_conv, "shifted inputs; other slots and layers untouched"),
                        rel("slot states", slot_ssm, tol, why),
                        bits("captured conv windows", cap_conv, "window copies"),
                        rel("captured states", cap_ssm, tol, why)};
          }};
}

// A mixed step: a prefill chunk, a decode token, a verify row (1 + 3 drafts), a short prefill, a
// prefill chunk ending in 2 drafts; slots out of order, some unused.
std::vector<GdnSeq> mixed_batch() {
  return {{0, 17, 0, 2}, {17, 1, 0, 0}, {18, 4, 3, 5}, {22, 5, 0, 7}, {27, 6, 2, 3}};
}

}  // namespace

void add_attention_cases(std::vector<Case>& cases) {
  cases.push_back(attention_causal_case(1, 0, 64));
  cases.push_back(attention_causal_case(1, 100, 128));
  cases.push_back(attention_causal_case(5, 37, 64));
  cases.push_back(attention_causal_case(16, 0, 128));
  cases.push_back(attention_causal_case(17, 33, 128));
  cases.push_back(attention_causal_case(65, 70, 128));
  cases.push_back(attention_batch_case({1, 17, 33, 64, 100, 257}));
  cases.push_back(attention_batch_case({5, 300}));
  cases.push_back(attention_batch_case({40}));
  cases.push_back(attention_step_case({1, 17, 100, 337, 1000, 5, 300}, {1, 17, 64, 337, 1000, 5, 1}));
  cases.push_back(attention_step_case({64, 80}, {64, 16}));
  cases.push_back(attention_prep_case(1, 64, 32, {0, 0, 0, 0}));
  cases.push_back(attention_prep_case(5, 128, 64, {11, 11, 10, 0}));
  cases.push_back(attention_prep_case(17, 64, 64, {0, 0, 0, 0}));
}

void add_gdn_cases(std::vector<Case>& cases) {
  for (const GdnDims& g : kDims) {
    for (size_t T : {1, 5, 65}) cases.push_back(conv1d_case(T, g));
    cases.push_back(conv_token_case(g));
    cases.push_back(conv_captured_case(g, 4, 3));
    cases.push_back(conv_captured_case(g, 2, 1));
    cases.push_back(conv_slots_case(g, {5, 0, 3, 6}));
    cases.push_back(conv_slots_case(g, {4}));
    for (size_t T : {1, 2, 5, 16, 33, 65}) cases.push_back(gdn_case(T, g));
    for (bool raw : {false, true}) {
      cases.push_back(gdn_captured_case(g, 4, 3, raw));
      cases.push_back(gdn_captured_case(g, 3, 2, raw));
      cases.push_back(gdn_slots_case(g, {5, 0, 3, 6}, raw));
      cases.push_back(gdn_slots_case(g, {1}, raw));
    }
    cases.push_back(gdn_mix_case("mixed prefill+decode+verify", g, mixed_batch()));
    cases.push_back(gdn_mix_case("decode only", g, {{0, 1, 0, 6}, {1, 1, 0, 1}, {2, 1, 0, 4}, {3, 1, 0, 0}}));
    cases.push_back(gdn_mix_case("verify rows only", g, {{0, 4, 3, 1}, {4, 3, 2, 6}}));
    cases.push_back(gdn_mix_case("prefill only", g, {{0, 65, 0, 3}, {65, 33, 0, 4}}));
  }
  for (size_t T : {1, 7, 33}) {
    cases.push_back(gates_case(T, 3));
    cases.push_back(gates_case(T, 32));
  }
}

// gdn_mix over the mixed batch == each sequence's tokens decoded one at a time (one-sequence
// decode steps), bit for bit: outputs, conv rows, final windows and states; each verify row's
// capture j == the window and state after the token it follows.
void expect_gdn_mix_equals_token_by_token(Backend& be) {
  for (const GdnDims& g : kDims) {
    const MixStep m = make_mix(g, mixed_batch(), 900);
    Dev d(be);
    MixRun mixed(d, m), alone(d, m);
    mixed.run_all();
    std::vector<std::vector<float>> want_caps(kSlots * StatePool::kMaxCaptures);
    for (const GdnSeq& s : m.seqs) {
      for (size_t t = 0; t < s.n_tokens; ++t) {
        const GdnSeq one{0, 1, 0, s.slot};
        alone.d.be.gdn_mix(alone.batch(&one, &s.slot, 1, 1, s.offset + t));
        const size_t first_capture = s.n_tokens - s.n_draft - 1;  // capture j follows token first_capture + j
        if (s.n_draft > 0 && t >= first_capture && t - first_capture < s.n_draft) {
          want_caps[s.slot * StatePool::kMaxCaptures + (t - first_capture)] =
              d.get(alone.pool.conv(s.slot, kLayer), g.window() + g.state());
        }
      }
    }
    const auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(d.get(mixed.out, m.T * g.nv * g.dv), d.get(alone.out, m.T * g.nv * g.dv))) << g.str() << " out";
    EXPECT_TRUE(same(d.get(mixed.conv_out, m.T * g.C()), d.get(alone.conv_out, m.T * g.C()))) << g.str() << " conv_out";
    EXPECT_TRUE(same(mixed.slot_records(), alone.slot_records())) << g.str() << " slot records";
    size_t n_caps = 0;
    for (size_t i = 0; i < want_caps.size(); ++i) {
      if (want_caps[i].empty()) continue;
      ++n_caps;
      const uint32_t slot = static_cast<uint32_t>(i / StatePool::kMaxCaptures), j = i % StatePool::kMaxCaptures;
      EXPECT_TRUE(same(d.get(mixed.pool.capture_layer(slot, j, kLayer), g.window() + g.state()), want_caps[i]))
          << g.str() << " capture " << j << " of slot " << slot;
    }
    EXPECT_EQ(n_caps, 5u);  // 3 of the verify row, 2 of the drafted prefill
  }
}

}  // namespace ds::backend_ops
