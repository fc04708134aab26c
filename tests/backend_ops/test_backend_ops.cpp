// Backend-ops parity (llama.cpp test-backend-ops style): one table of cases (op, shape, a function
// that fills seeded random inputs, runs the op on a Backend through alloc / upload / download and
// returns the named outputs with their bounds), each run on the CPU backend (make_cpu_backend, the
// reference) and on the CUDA backend in two modes: default options (bf16_prefill = true) and
// bf16_prefill = false (f32 products everywhere). A fresh backend per run: the CUDA backend caches
// weight uploads by host address, which a later case may reuse.
//
// Metrics (backend_ops_cases.h Metric):
//  * bits: memcmp. Copies, gathers, scatters, embedding rows (dequantization d*q is exact on both),
//    add_inplace (one f32 add), conv windows (shifted inputs), digest ids and sampled tokens.
//  * rel: max_i |got_i - ref_i| / max_i |ref_i|. Norms, activations, rope, conv, gates: 2e-6 (f32,
//    reduction order and expf/cos/sin ulps; tests/kernels/cuda/test_cuda_fused.cpp,
//    test_cuda_rowwise.cpp, test_cuda_attention_prep.cpp). GDN recurrence: 2e-5
//    (test_cuda_gdn.cpp, test_cuda_gdn_slots.cpp), 4e-3 for the bf16-mode chunked prefill on tf32
//    tensor cores (>= 32 tokens, test_cuda_gdn_chunked.cpp kTcTol). Attention: 2e-5 (f32 online
//    softmax, test_cuda_attention_prefill.cpp kTol), 4e-3 for bf16-mode prefill (>= 16 queries,
//    kTcTol there). Digest log-probs / log-sum-exp: 1e-5 (summation order of the log-sum-exp).
//  * per-element (products y = W x): |got - ref| <= allowance, with A = sum_i |w_i x_i| and
//    B = sum_i |w_i| max|x| of the reference's operands (tests/kernels/cuda/test_cuda_matmul.cpp,
//    test_cuda_gemv_split.cpp, test_cuda_gemm_paths.cpp): f32 paths 2e-6 A; the split-rows Q8_0 GEMV
//    (cols % 512 == 0, <= 8 tokens off the bf16 range) 2e-6 A + ((22 + cols/512) 2^-23 + 2^-22) B;
//    bf16 tensor-core products (Q8_0, bf16 mode, >= 16 tokens, or 5..64 tokens on split rows)
//    4e-3 A + (cols/16 + 16) 17 2^-24 A.
//
// Build: always. Without CUDA compiled in (DELTASERVE_HAVE_CUDA undefined: ds_backend_cuda does not
// exist), and with CUDA but no visible device, every CUDA case GTEST_SKIPs with the reason, so the
// case list is the same everywhere; the CPU half still runs: every case twice on the CPU backend
// (1 and 3 threads, bit for bit: the kernels are thread-count invariant) and the composite ops
// (project, gdn_mix) against their compositions of primitive ops, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string>

#include "common/gguf_writer.h"
#include "common/q8_split.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/matmul.h"
#include "tests/backend_ops/backend_ops_cases.h"
#ifdef DELTASERVE_HAVE_CUDA
#include "kernels/cuda/device_info.h"
#include "worker/cuda_backend.h"
#endif

namespace ds::backend_ops {

HostMatrix make_matrix(GgmlType type, size_t rows, size_t cols, Rng& rng) {
  HostMatrix m;
  m.rows = rows;
  m.cols = cols;
  const std::vector<float> f = rng.vec(rows * cols);
  if (type == GgmlType::Q8_0) {
    m.bytes = quantize_q8_0(f.data(), f.size());
  } else {
    m.bytes.resize(f.size() * sizeof(float));
    std::memcpy(m.bytes.data(), f.data(), m.bytes.size());
  }
  m.deq.resize(rows * cols);
  dequantize_row(type, m.bytes.data(), m.deq.data(), m.deq.size());
  m.t.name = "w";
  m.t.n_dims = 2;
  m.t.ne = {cols, rows, 1, 1};
  m.t.type = type;
  m.t.nbytes = m.bytes.size();
  m.t.data = m.bytes.data();
  return m;
}

HostMatrix stack_matrices(const std::vector<const HostMatrix*>& parts) {
  HostMatrix m;
  m.cols = parts[0]->cols;
  for (const HostMatrix* p : parts) {
    m.rows += p->rows;
    m.bytes.insert(m.bytes.end(), p->bytes.begin(), p->bytes.end());
    m.deq.insert(m.deq.end(), p->deq.begin(), p->deq.end());
  }
  m.t = parts[0]->t;
  m.t.ne = {m.cols, m.rows, 1, 1};
  m.t.nbytes = m.bytes.size();
  m.t.data = m.bytes.data();
  return m;
}

std::vector<double> matmul_allowance(const HostMatrix& w, const std::vector<float>& x, size_t xs, size_t n,
                                     const Target& target, std::string* why) {
  const bool q8 = w.t.type == GgmlType::Q8_0;
  const bool split = q8 && !target.ablated && q8_split_eligible(w.cols, w.t.row_bytes());
  const bool bf16 = target.bf16_prefill && q8 && (n >= 16 || (split && n >= 5 && n <= 64));
  const bool split_gemv = split && !bf16 && n <= 8;
  const double u = std::ldexp(1.0, -24);
  const double ka = bf16 ? 4e-3 + (static_cast<double>(w.cols) / 16 + 16) * 17 * u : 2e-6;
  const double kb = split_gemv ? (22.0 + static_cast<double>(w.cols / 512)) * 2 * u + 4 * u : 0.0;
  *why = bf16         ? "bf16 tensor-core product: 4e-3 sum|wx| (test_cuda_matmul.cpp / test_cuda_gemv_split.cpp)"
         : split_gemv ? "split-rows Q8_0 GEMV: 2e-6 sum|wx| + its rounding bound (test_cuda_gemv_split.cpp)"
                      : "f32 product, summation order: 2e-6 sum|wx| (test_cuda_matmul.cpp)";
  std::vector<double> allowed(n * w.rows);
  for (size_t t = 0; t < n; ++t) {
    const float* xt = x.data() + t * xs;
    double xmax = 0;
    for (size_t i = 0; i < w.cols; ++i) xmax = std::max(xmax, std::fabs(static_cast<double>(xt[i])));
    for (size_t r = 0; r < w.rows; ++r) {
      double a = 0, b = 0;
      for (size_t i = 0; i < w.cols; ++i) {
        a += std::fabs(static_cast<double>(w.deq[r * w.cols + i]) * xt[i]);
        b += std::fabs(static_cast<double>(w.deq[r * w.cols + i]));
      }
      allowed[t * w.rows + r] = ka * a + kb * b * xmax + 1e-30;
    }
  }
  return allowed;
}

Out product_out(std::string name, std::vector<float> y, const HostMatrix& w, const std::vector<float>& x, size_t xs,
                size_t n, size_t ys, const Target& target) {
  std::string why;
  const std::vector<double> a = matmul_allowance(w, x, xs, n, target, &why);
  std::vector<double> allowed(y.size(), 0.0);  // stride padding: untouched (zero) on both
  for (size_t t = 0; t < n; ++t) {
    for (size_t r = 0; r < w.rows; ++r) allowed[t * ys + r] = a[t * w.rows + r];
  }
  return {std::move(name), std::move(y), Metric::kPerElement, 0, std::move(allowed), std::move(why)};
}

namespace {

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  add_core_cases(cases);
  add_attention_cases(cases);
  add_gdn_cases(cases);
  add_kv_cases(cases);
  add_vision_cases(cases);
  add_moe_cases(cases);
  return cases;
}

const std::vector<Case>& table() {
  static const std::vector<Case> cases = all_cases();
  return cases;
}

// Compares `got` with the reference `want` (same case, same order); false and a message on failure.
void expect_match(const Outs& got, const Outs& want, const std::string& what, bool print_margins = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t o = 0; o < want.size(); ++o) {
    const Out& w = want[o];
    const Out& g = got[o];
    ASSERT_EQ(g.name, w.name) << what;
    ASSERT_EQ(g.v.size(), w.v.size()) << what << " " << w.name;
    const std::string where = what + " output '" + w.name + "' (" + w.why + ")";
    switch (w.metric) {
      case Metric::kBits:
        EXPECT_EQ(std::memcmp(g.v.data(), w.v.data(), w.v.size() * sizeof(float)), 0) << where << ": not bit-exact";
        break;
      case Metric::kRelMax: {
        const double err = cpu::test::rel_error(g.v, w.v);
        EXPECT_LE(err, w.tol) << where;
        EXPECT_FALSE(std::isnan(err)) << where;
        if (print_margins)
          std::printf("[ margin ] %s '%s': rel err %.3g of %.3g\n", what.c_str(), w.name.c_str(), err, w.tol);
        break;
      }
      case Metric::kPerElement: {
        double worst = 0;
        size_t at = 0;
        for (size_t i = 0; i < w.v.size(); ++i) {
          const double err = std::fabs(static_cast<double>(g.v[i]) - w.v[i]);
          const double e = err == 0 ? 0.0 : err / w.allowed[i];  // allowance 0: must be exact (stride padding)
          if (!(e <= worst)) worst = e, at = i;                  // NaN counts as the worst
        }
        EXPECT_LE(worst, 1.0) << where << ": worst error / allowance at element " << at << " got " << g.v[at]
                              << " want " << w.v[at];
        if (print_margins)
          std::printf("[ margin ] %s '%s': worst error / allowance %.3g\n", what.c_str(), w.name.c_str(), worst);
        break;
      }
    }
  }
}

std::string sanitize(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  const Case& c = table()[info.param];
  return sanitize(c.op + "_" + c.shape) + "_" + std::to_string(info.param);
}

const Target kF32{"cuda_f32", false, false};
const Target kBf16{"cuda_bf16", true, false};
const Target kAblated{"cuda_bf16_ablated", true, true};

// ---- the CPU half: every case on the CPU backend, 1 vs 3 threads, bit for bit ------------------
class BackendOpsCpu : public ::testing::TestWithParam<size_t> {};

TEST_P(BackendOpsCpu, ThreadCountInvariant) {
  const Case& c = table()[GetParam()];
  for (const Target& target : {kF32, kBf16}) {
    Outs one, three;
    {
      const std::unique_ptr<Backend> be = make_cpu_backend(1);
      one = c.run(*be, target);
    }
    {
      const std::unique_ptr<Backend> be = make_cpu_backend(3);
      three = c.run(*be, target);
    }
    ASSERT_FALSE(one.empty());
    for (Out& o : three) o.metric = Metric::kBits, o.why = "CPU kernels are thread-count invariant";
    expect_match(one, three, c.op + " [" + c.shape + "] cpu(1) vs cpu(3)");
  }
}

INSTANTIATE_TEST_SUITE_P(Table, BackendOpsCpu, ::testing::Range<size_t>(0, table().size()), case_name);

// ---- the CUDA half -----------------------------------------------------------------------------
class BackendOpsCuda : public ::testing::TestWithParam<size_t> {};

void run_cuda(const Case& c, const Target& target) {
#ifndef DELTASERVE_HAVE_CUDA
  (void)c;
  (void)target;
  GTEST_SKIP() << "built without CUDA (DELTASERVE_HAVE_CUDA undefined): CUDA parity skipped";
#else
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  Outs want, got;
  {
    const std::unique_ptr<Backend> be = make_cpu_backend(4);
    want = c.run(*be, target);
  }
  {
    CudaAblations ablations;
    if (target.ablated) {
      ablations.device_logit_digest = false;
      ablations.fused_decode_ops = false;
      ablations.stacked_weights = false;
      ablations.prefill_fusions = false;
      ablations.q8_split = false;
    }
    const std::unique_ptr<Backend> be =
        make_cuda_backend(0, CudaBackendOptions{.bf16_prefill = target.bf16_prefill}, ablations);
    got = c.run(*be, target);
  }
  expect_match(got, want, c.op + " [" + c.shape + "] " + target.name + " vs cpu", true);
#endif
}

TEST_P(BackendOpsCuda, MatchesCpuBf16Prefill) {
  run_cuda(table()[GetParam()], kBf16);
}
TEST_P(BackendOpsCuda, MatchesCpuF32) {
  run_cuda(table()[GetParam()], kF32);
}
TEST_P(BackendOpsCuda, MatchesCpuAblated) {
  run_cuda(table()[GetParam()], kAblated);
}

INSTANTIATE_TEST_SUITE_P(Table, BackendOpsCuda, ::testing::Range<size_t>(0, table().size()), case_name);

// ---- composite ops on the CPU backend: equal to their compositions, bit for bit -----------------
TEST(BackendOpsComposite, ProjectEqualsPartProducts) {
  Rng rng(71);
  const HostMatrix a = make_matrix(GgmlType::Q8_0, 7, 512, rng), b = make_matrix(GgmlType::Q8_0, 33, 512, rng),
                   c = make_matrix(GgmlType::Q8_0, 24, 512, rng);
  const HostMatrix s = stack_matrices({&a, &b, &c});
  const std::unique_ptr<Backend> be = make_cpu_backend(2);
  for (size_t n : {size_t{1}, size_t{3}, size_t{17}}) {
    for (bool stacked : {false, true}) {
      Dev d(*be);
      const std::vector<float> x = rng.vec(n * 512);
      const float* dx = d.put(x);
      const WeightView wa = be->weight(a.t), wb = be->weight(b.t), wc = be->weight(c.t);
      const WeightView stack = stacked ? be->weight(s.t) : WeightView{};
      const size_t rows[3] = {7, 33, 24};
      float* joined = d.alloc(64);
      Backend::ProjectionPart parts[3] = {
          {&wa, 7, d.alloc(n * 7)}, {&wb, 33, d.alloc(n * 33)}, {&wc, 24, d.alloc(n * 24)}};
      float* where[3] = {};
      be->project(stack, parts, 3, dx, 512, n, joined, true, where);
      const WeightView* ws[3] = {&wa, &wb, &wc};
      for (int i = 0; i < 3; ++i) {
        float* want = d.alloc(n * rows[i]);
        be->matmul(*ws[i], dx, 512, n, want, rows[i]);
        EXPECT_EQ(std::memcmp(d.get(where[i], n * rows[i]).data(), d.get(want, n * rows[i]).data(),
                              n * rows[i] * sizeof(float)),
                  0)
            << "part " << i << " n=" << n << (stacked ? " stacked" : "");
      }
    }
  }
}

TEST(BackendOpsComposite, GdnMixEqualsTokenByTokenDecode) {
  const std::unique_ptr<Backend> be = make_cpu_backend(2);
  expect_gdn_mix_equals_token_by_token(*be);
}

// ---- the cases: dense products, norms, activations, rows, digests -------------------------------

Case product_case(GgmlType type, size_t rows, size_t cols, size_t n, size_t pad) {
  return {"matmul",
          std::string(ggml_type_name(type)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
              " n=" + std::to_string(n) + " pad=" + std::to_string(pad),
          [=](Backend& be, const Target& target) {
            Rng rng(1000 + rows * 7 + cols * 3 + n);
            const HostMatrix w = make_matrix(type, rows, cols, rng);
            const size_t xs = cols + pad, ys = rows + pad;
            const std::vector<float> x = rng.vec(n * xs);
            Dev d(be);
            float* y = d.alloc(n * ys);
            be.matmul(be.weight(w.t), d.put(x), xs, n, y, ys);
            return Outs{product_out("y", d.get(y, n * ys), w, x, xs, n, ys, target)};
          }};
}

// A stacked matrix (weight_stack, or on a backend without stacks the stacked bytes) to row outputs.
WeightView stacked_view(Backend& be, const std::vector<const HostMatrix*>& parts, const HostMatrix& whole) {
  std::vector<const GgufTensor*> ts;
  for (const HostMatrix* p : parts) ts.push_back(&p->t);
  const WeightView w = be.weight_stack(ts.data(), ts.size());
  return w.data != nullptr ? w : be.weight(whole.t);
}

// The part p's rows of an [n][whole rows] product, as [n][p rows].
Out part_out(std::string name, std::vector<float> y, const HostMatrix& part, const std::vector<float>& x, size_t xs,
             size_t n, const Target& target) {
  return product_out(std::move(name), std::move(y), part, x, xs, n, part.rows, target);
}

Case matmul_rows_case(size_t n) {
  return {"matmul_rows", "Q8_0 7+33+24 x 512 n=" + std::to_string(n), [=](Backend& be, const Target& target) {
            Rng rng(200 + n);
            const HostMatrix a = make_matrix(GgmlType::Q8_0, 7, 512, rng),
                             b = make_matrix(GgmlType::Q8_0, 33, 512, rng),
                             c = make_matrix(GgmlType::Q8_0, 24, 512, rng);
            const HostMatrix s = stack_matrices({&a, &b, &c});
            const std::vector<float> x = rng.vec(n * 512);
            Dev d(be);
            const Backend::RowOutput outs[3] = {
                {7, d.alloc(n * 7), 7}, {33, d.alloc(n * 33), 33}, {24, d.alloc(n * 24), 24}};
            be.matmul_rows(stacked_view(be, {&a, &b, &c}, s), d.put(x), 512, n, outs, 3);
            return Outs{part_out("a", d.get(outs[0].y, n * 7), a, x, 512, n, target),
                        part_out("b", d.get(outs[1].y, n * 33), b, x, 512, n, target),
                        part_out("c", d.get(outs[2].y, n * 24), c, x, 512, n, target)};
          }};
}

Case project_case(size_t n, bool stacked, bool multi_token) {
  return {"project",
          std::string(stacked ? "stacked" : "separate") + (multi_token ? " multi" : "") +
              " Q8_0 7+33+24 x 1024 n=" + std::to_string(n),
          [=](Backend& be, const Target& target) {
            Rng rng(300 + n);
            const HostMatrix a = make_matrix(GgmlType::Q8_0, 7, 1024, rng),
                             b = make_matrix(GgmlType::Q8_0, 33, 1024, rng),
                             c = make_matrix(GgmlType::Q8_0, 24, 1024, rng);
            const HostMatrix s = stack_matrices({&a, &b, &c});
            const std::vector<float> x = rng.vec(n * 1024);
            Dev d(be);
            const WeightView wa = be.weight(a.t), wb = be.weight(b.t), wc = be.weight(c.t);
            const WeightView stack = stacked ? stacked_view(be, {&a, &b, &c}, s) : WeightView{};
            float* joined = d.alloc(64);
            const Backend::ProjectionPart parts[3] = {
                {&wa, 7, d.alloc(n * 7)}, {&wb, 33, d.alloc(n * 33)}, {&wc, 24, d.alloc(n * 24)}};
            float* where[3] = {};
            be.project(stack, parts, 3, d.put(x), 1024, n, joined, multi_token, where);
            return Outs{part_out("a", d.get(where[0], n * 7), a, x, 1024, n, target),
                        part_out("b", d.get(where[1], n * 33), b, x, 1024, n, target),
                        part_out("c", d.get(where[2], n * 24), c, x, 1024, n, target)};
          }};
}

constexpr float kEps = 1e-6f;

Case rms_norm_case(size_t rows, size_t dim, size_t pad, bool gain) {
  return {"rms_norm",
          std::to_string(rows) + "x" + std::to_string(dim) + " pad=" + std::to_string(pad) + (gain ? "" : " no gain"),
          [=](Backend& be, const Target&) {
            Rng rng(400 + rows + dim);
            const size_t s = dim + pad;
            Dev d(be);
            const float* x = d.put(rng.vec(rows * s, -3, 3));
            const float* w = gain ? d.put(rng.vec(dim, 0.5f, 1.5f)) : nullptr;
            float* y = d.alloc(rows * s);
            be.rms_norm(x, s, w, kEps, rows, dim, y, s);
            return Outs{rel("y", d.get(y, rows * s), 2e-6, "f32 norm, reduction order (test_cuda_rowwise.cpp)")};
          }};
}

Case gated_rms_norm_case(size_t rows, size_t dim) {
  return {"gated_rms_norm", std::to_string(rows) + "x" + std::to_string(dim), [=](Backend& be, const Target&) {
            Rng rng(410 + rows + dim);
            Dev d(be);
            const float *o = d.put(rng.vec(rows * dim, -2, 2)), *z = d.put(rng.vec(rows * dim, -4, 4)),
                        *w = d.put(rng.vec(dim, 0.5f, 1.5f));
            float* y = d.alloc(rows * dim);
            be.gated_rms_norm(o, z, w, kEps, rows, dim, y);
            return Outs{rel("y", d.get(y, rows * dim), 2e-6, "f32 norm + silu: reduction order, expf ulps")};
          }};
}

Case l2_norm_case(size_t rows, size_t dim, size_t pad) {
  return {"l2_norm", std::to_string(rows) + "x" + std::to_string(dim) + " pad=" + std::to_string(pad),
          [=](Backend& be, const Target&) {
            Rng rng(420 + rows + dim);
            const size_t s = dim + pad;
            Dev d(be);
            const float* x = d.put(rng.vec(rows * s, -2, 2));
            float* y = d.alloc(rows * s);
            be.l2_norm(x, s, kEps, rows, dim, y, s);
            return Outs{rel("y", d.get(y, rows * s), 2e-6, "f32 norm, reduction order")};
          }};
}

Case l2_norm_heads_case(size_t n_tokens, size_t heads, size_t dim) {
  return {
      "l2_norm_heads",
      std::to_string(n_tokens) + " tokens x " + std::to_string(heads) + " heads x " + std::to_string(dim),
      [=](Backend& be, const Target&) {
        Rng rng(430 + n_tokens + dim);
        const size_t ts = heads * dim + 3 * dim + 5;  // the heads sit inside wider token rows
        Dev d(be);
        float* x = d.put(rng.vec(n_tokens * ts, -2, 2));
        be.l2_norm_heads(x, ts, n_tokens, heads, dim, kEps);
        return Outs{rel("x", d.get(x, n_tokens * ts), 2e-6, "f32 norm, reduction order (test_cuda_l2_norm_heads.cpp)")};
      }};
}

Case rope_case(size_t n_tokens, size_t head_dim, size_t n_rot, std::array<int32_t, 4> sections) {
  return {"rope_neox",
          std::to_string(n_tokens) + " tokens d=" + std::to_string(head_dim) + " rot=" + std::to_string(n_rot) +
              (sections[0] != 0 ? " mrope" : ""),
          [=](Backend& be, const Target&) {
            Rng rng(440 + n_tokens + n_rot);
            const size_t H = 3, hs = 2 * head_dim, ts = H * hs + 7;
            std::vector<int32_t> pos(3 * n_tokens);
            for (auto& p : pos) p = rng.integer(0, 5000);
            Dev d(be);
            float* x = d.put(rng.vec(n_tokens * ts));
            be.rope_neox(x, n_tokens, ts, H, hs, head_dim, n_rot, pos.data(), sections, 1e7f);
            return Outs{rel("x", d.get(x, n_tokens * ts), 2e-6,
                            "cos/sin of the same f32 angle, <= 2 ulp (test_cuda_rowwise.cpp)")};
          }};
}

Case swiglu_case(size_t n) {
  return {"swiglu", "n=" + std::to_string(n), [=](Backend& be, const Target&) {
            Rng rng(450 + n);
            Dev d(be);
            const float *g = d.put(rng.vec(n, -6, 6)), *u = d.put(rng.vec(n, -2, 2));
            float* y = d.alloc(n);
            be.swiglu(g, u, n, y);
            return Outs{rel("y", d.get(y, n), 2e-6, "expf ulps")};
          }};
}

Case swiglu_matmul_case(size_t n, size_t rows, size_t cols) {
  return {"swiglu_matmul", "Q8_0 " + std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(n),
          [=](Backend& be, const Target& target) {
            Rng rng(460 + n + cols);
            const HostMatrix w = make_matrix(GgmlType::Q8_0, rows, cols, rng);
            const std::vector<float> gate = rng.vec(n * cols, -4, 4), up = rng.vec(n * cols, -2, 2);
            std::vector<float> act(n * cols);
            cpu::swiglu(gate.data(), up.data(), act.size(), act.data());  // the product's operand
            Dev d(be);
            float* dg = d.put(gate);
            float* y = d.alloc(n * rows);
            be.swiglu_matmul(dg, d.put(up), n, be.weight(w.t), y, rows);
            Out o = product_out("y", d.get(y, n * rows), w, act, cols, n, rows, target);
            for (double& a : o.allowed) a *= 1.01;  // silu's expf ulps in the operand
            return Outs{o};
          }};
}

Case sigmoid_gate_case(size_t rows, size_t dim) {
  return {"sigmoid_gate", std::to_string(rows) + "x" + std::to_string(dim), [=](Backend& be, const Target&) {
            Rng rng(470 + rows + dim);
            const size_t xs = dim + 3, gs = 2 * dim, ys = dim + 1;
            Dev d(be);
            const float *x = d.put(rng.vec(rows * xs, -2, 2)), *g = d.put(rng.vec(rows * gs, -6, 6));
            float* y = d.alloc(rows * ys);
            be.sigmoid_gate(x, xs, g, gs, rows, dim, y, ys);
            return Outs{rel("y", d.get(y, rows * ys), 2e-6, "expf ulps")};
          }};
}

Case add_inplace_case(size_t n) {
  return {"add_inplace", "n=" + std::to_string(n), [=](Backend& be, const Target&) {
            Rng rng(480 + n);
            Dev d(be);
            float* y = d.put(rng.vec(n, -3, 3));
            be.add_inplace(y, d.put(rng.vec(n, -3, 3)), n);
            return Outs{bits("y", d.get(y, n), "one f32 add per element")};
          }};
}

Case add_rms_norm_case(size_t rows, size_t dim) {
  return {"add_rms_norm", std::to_string(rows) + "x" + std::to_string(dim), [=](Backend& be, const Target&) {
            Rng rng(490 + rows + dim);
            Dev d(be);
            float* x = d.put(rng.vec(rows * dim, -3, 3));
            const float *delta = d.put(rng.vec(rows * dim, -3, 3)), *w = d.put(rng.vec(dim, 0.5f, 1.5f));
            float* y = d.alloc(rows * dim);
            be.add_rms_norm(x, delta, w, kEps, rows, dim, y);
            return Outs{bits("x", d.get(x, rows * dim), "one f32 add per element"),
                        rel("y", d.get(y, rows * dim), 2e-6, "f32 norm, reduction order (test_cuda_fused.cpp)")};
          }};
}

Case gather_case(size_t n_rows, size_t dim) {
  return {"gather_rows", std::to_string(n_rows) + " rows x " + std::to_string(dim), [=](Backend& be, const Target&) {
            Rng rng(500 + n_rows + dim);
            const size_t table_rows = 3 * n_rows + 2;
            std::vector<uint32_t> rows(table_rows);
            std::iota(rows.begin(), rows.end(), 0u);
            for (size_t i = table_rows - 1; i > 0; --i)
              std::swap(rows[i], rows[static_cast<size_t>(rng.integer(0, int(i)))]);
            rows.resize(n_rows);  // distinct, out of order
            Dev d(be);
            const float* src = d.put(rng.vec(table_rows * dim));
            float* dst = d.alloc(n_rows * dim);
            be.gather_rows(src, rows.data(), n_rows, dim, dst);
            return Outs{bits("dst", d.get(dst, n_rows * dim), "a copy")};
          }};
}

Case embed_case(GgmlType type, size_t rows, size_t cols) {
  return {"embed_rows", std::string(ggml_type_name(type)) + " " + std::to_string(rows) + "x" + std::to_string(cols),
          [=](Backend& be, const Target&) {
            Rng rng(510 + rows + cols);
            const HostMatrix w = make_matrix(type, rows, cols, rng);
            const std::vector<int32_t> ids = {0, int32_t(rows - 1), 5, 5, 2, int32_t(rows / 2), 0};
            Dev d(be);
            float* out = d.alloc(ids.size() * cols);
            be.embed_rows(be.weight(w.t), ids.data(), ids.size(), out);
            return Outs{bits("rows", d.get(out, ids.size() * cols), "dequantization d*q is exact on both")};
          }};
}

// Penalty-style edits (both signs of logit, scales either side of 1, additions, a -inf mask) on
// scattered (row, id) cells; every other cell untouched.
Case edit_logits_case(size_t n_rows, size_t vocab, size_t n_edits) {
  return {
      "edit_logits",
      std::to_string(n_edits) + " edits on " + std::to_string(n_rows) + " rows x " + std::to_string(vocab),
      [=](Backend& be, const Target&) {
        Rng rng(520 + n_rows + vocab + n_edits);
        std::vector<LogitEdit> edits;
        for (size_t i = 0; i < n_edits; ++i) {
          LogitEdit e;
          e.row = static_cast<uint32_t>(i % n_rows);
          e.id = static_cast<int32_t>((i / n_rows * 7919 + e.row * 31) % vocab);  // distinct per row
          e.scale_pos = i % 3 == 0 ? 1.0f : 1.0f / 1.3f;
          e.scale_neg = i % 3 == 0 ? 1.0f : 1.3f;
          e.add = i % 11 == 5 ? -std::numeric_limits<float>::infinity()
                              : static_cast<float>(rng.integer(-200, 200)) * 0.37f;
          edits.push_back(e);
        }
        Dev d(be);
        float* logits = d.put(rng.vec(n_rows * vocab));
        be.edit_logits(logits, n_rows, vocab, edits.data(), edits.size());
        return Outs{bits("logits", d.get(logits, n_rows * vocab), "one float multiply and one add, unfused on both")};
      }};
}

// Grammar masks on some rows of a block (dense, sparse and one-id masks; a vocabulary longer
// than the masks' words, whose tail is disallowed); unmasked rows untouched.
Case mask_logits_case(size_t n_rows, size_t vocab, size_t mask_vocab) {
  return {
      "mask_logits",
      std::to_string(n_rows) + " rows x " + std::to_string(vocab) + ", masks of " + std::to_string(mask_vocab) + " ids",
      [=](Backend& be, const Target&) {
        Rng rng(530 + n_rows + vocab);
        TokenMasks m;
        m.n_words = static_cast<uint32_t>((mask_vocab + 31) / 32);
        // Rows 0, 2, 4, ... with masks of their own; with more than 3 rows the last one (odd)
        // shares row 0's mask.
        const size_t last_shared = n_rows > 3 && n_rows % 2 == 0 ? n_rows - 1 : (n_rows > 3 ? n_rows - 2 : 0);
        for (size_t r = 0; r < n_rows; r += 2) {
          if (last_shared != 0 && r >= last_shared) break;
          m.rows.push_back(static_cast<uint32_t>(r));
          m.mask_of_row.push_back(static_cast<uint32_t>(m.rows.size() - 1));
          for (uint32_t w = 0; w < m.n_words; ++w) {
            const uint32_t pick = r % 3 == 0 ? static_cast<uint32_t>(rng.integer(0, 1 << 30)) * 3u
                                             : (w == r % m.n_words ? 1u << (r % 32) : 0u);
            m.bits.push_back(pick);
          }
        }
        if (last_shared != 0) {
          m.rows.push_back(static_cast<uint32_t>(last_shared));
          m.mask_of_row.push_back(0);
        }
        Dev d(be);
        float* logits = d.put(rng.vec(n_rows * vocab));
        be.mask_logits(logits, n_rows, vocab, m);
        return Outs{bits("logits", d.get(logits, n_rows * vocab), "a copy or -inf: exact")};
      }};
}

Case digest_case(size_t n_rows, size_t vocab) {
  return {"digest_logits_rows", std::to_string(n_rows) + " rows x " + std::to_string(vocab),
          [=](Backend& be, const Target&) {
            Rng rng(520 + n_rows + vocab);
            std::vector<float> logits = rng.vec(n_rows * vocab, -8, 8);
            for (size_t r = 0; r < n_rows; ++r) logits[r * vocab + (r * 37 + 3) % vocab] = 20.0f;  // clear winners
            std::vector<DigestRequest> req(n_rows);
            for (size_t r = 0; r < n_rows; ++r) {
              req[r].rule = r % 2 == 0 ? SamplingRule{} : SamplingRule{0.8f, 40, 0.95f};
              req[r].u = 0.1 + 0.2 * static_cast<double>(r);
              // Prompt-logprob rows: a forced id, mostly not a candidate (its logit read where it lies).
              if (r % 3 == 2) req[r] = {SamplingRule{}, 0.0, static_cast<int32_t>((r * 101 + 7) % vocab)};
            }
            Dev d(be);
            const float* dl = d.put(logits);
            std::vector<LogitDigest> dg(n_rows);
            if (!be.digest_logits_rows(dl, n_rows, vocab, req.data(), dg.data())) {  // host digest (the reference)
              const std::vector<float> host = d.get(dl, logits.size());
              for (size_t r = 0; r < n_rows; ++r) {
                dg[r] = digest_request(host.data() + r * vocab, vocab, req[r]);
              }
            }
            std::vector<float> ids, lp, lse;
            for (const LogitDigest& g : dg) {
              for (int32_t id : g.top_ids) ids.push_back(static_cast<float>(id));
              ids.push_back(static_cast<float>(g.token));
              lp.insert(lp.end(), g.top_logprobs.begin(), g.top_logprobs.end());
              lp.push_back(g.token_logprob);
              lse.push_back(static_cast<float>(g.logsumexp));
            }
            return Outs{bits("ids", ids, "top ids and sampled (or forced) tokens"),
                        rel("logprobs", lp, 1e-5, "log-sum-exp summation order"),
                        rel("logsumexp", lse, 1e-5, "log-sum-exp summation order")};
          }};
}

}  // namespace

void add_core_cases(std::vector<Case>& cases) {
  // Products: rows 1..257, widths off and on 32 / 512, 1..65 tokens, padded strides.
  for (size_t n : {1, 2, 5, 17, 65}) cases.push_back(product_case(GgmlType::F32, 33, 100, n, n % 2));
  cases.push_back(product_case(GgmlType::F32, 7, 33, 3, 1));
  const size_t q8[][4] = {{1, 32, 1, 0},   {3, 96, 2, 0},     {7, 512, 4, 0},    {33, 1024, 5, 0},  {257, 512, 16, 0},
                          {33, 96, 17, 3}, {65, 1024, 65, 0}, {257, 1536, 1, 0}, {129, 2048, 8, 0}, {33, 512, 2, 0},
                          {7, 1024, 9, 0}, {100, 160, 4, 1},  {31, 512, 33, 0},  {257, 2560, 3, 0}};
  for (const auto& c : q8) cases.push_back(product_case(GgmlType::Q8_0, c[0], c[1], c[2], c[3]));
  for (size_t n : {1, 3, 5, 17, 65}) cases.push_back(matmul_rows_case(n));
  for (size_t n : {1, 3, 5, 17, 65}) {
    cases.push_back(project_case(n, true, true));
    cases.push_back(project_case(n, false, false));
  }
  cases.push_back(project_case(4, true, false));
  cases.push_back(rms_norm_case(1, 4096, 0, true));
  cases.push_back(rms_norm_case(3, 17, 3, true));
  cases.push_back(rms_norm_case(7, 257, 0, false));
  cases.push_back(rms_norm_case(33, 1030, 2, true));
  cases.push_back(gated_rms_norm_case(1, 128));
  cases.push_back(gated_rms_norm_case(7, 33));
  cases.push_back(gated_rms_norm_case(33, 256));
  cases.push_back(l2_norm_case(3, 17, 3));
  cases.push_back(l2_norm_case(33, 128, 0));
  cases.push_back(l2_norm_case(257, 64, 1));
  for (size_t n : {1, 5, 17, 65}) cases.push_back(l2_norm_heads_case(n, 6, n == 5 ? 32 : 128));
  cases.push_back(rope_case(1, 64, 64, {0, 0, 0, 0}));
  cases.push_back(rope_case(5, 64, 32, {0, 0, 0, 0}));
  cases.push_back(rope_case(17, 128, 64, {11, 11, 10, 0}));
  for (size_t n : {1, 33, 4097}) cases.push_back(swiglu_case(n));
  for (size_t n : {1, 4, 5, 16, 17, 65}) cases.push_back(swiglu_matmul_case(n, 33, 512));
  cases.push_back(swiglu_matmul_case(17, 7, 96));
  cases.push_back(sigmoid_gate_case(1, 64));
  cases.push_back(sigmoid_gate_case(7, 33));
  for (size_t n : {1, 1000, 4097}) cases.push_back(add_inplace_case(n));
  cases.push_back(add_rms_norm_case(1, 4096));
  cases.push_back(add_rms_norm_case(3, 17));
  cases.push_back(add_rms_norm_case(33, 1024));
  cases.push_back(gather_case(1, 64));
  cases.push_back(gather_case(7, 33));
  cases.push_back(gather_case(65, 1024));
  cases.push_back(embed_case(GgmlType::Q8_0, 257, 96));
  cases.push_back(embed_case(GgmlType::Q8_0, 33, 1024));
  cases.push_back(embed_case(GgmlType::F32, 33, 70));
  cases.push_back(edit_logits_case(1, 1000, 1));
  cases.push_back(edit_logits_case(5, 4097, 333));
  cases.push_back(mask_logits_case(1, 1000, 1000));
  cases.push_back(mask_logits_case(7, 4097, 4000));
  cases.push_back(digest_case(1, 1000));
  cases.push_back(digest_case(4, 4097));
}

}  // namespace ds::backend_ops
