// test_backend_ops cases of the mixture-of-experts ops (worker/backend.h, kernels/cpu/moe.h):
// moe_route and moe_experts on the CPU backend (1 vs 3 threads, bit for bit) and on the CUDA backend
// against it (test_backend_ops.cpp runs the table), plus a CPU-only check of moe_experts against a
// float64 evaluation of its formula. Shapes: E 8 / 256 / 512, k 2 / 4 / 8 / 10, D 96 / 160 / 256 /
// 512 / 2048 and F 64 / 96 / 160 / 512 (multiples of 32, non-powers of two, and widths of 512 that
// the CUDA backend stores as split rows), T 1 / 3 / 17 / 40 / 300 / 4200: both CUDA regimes (at
// most 64 (token, slot) pairs: the gather kernels; more: the grouped ones) and a step past
// cuda::kMoeChunkPairs (two chunks).
// Bounds:
//  * route ids: bits. Both rank by comparing the same f32 logits (ties to the lower index), so
//    no rounding enters the choice; the inputs include exact ties.
//  * route weights: 2e-6 relative to the largest: the exps (CUDA expf within 2 ulp of glibc's) and
//    the softmax sum (warp tree vs sequential) differ by f32 rounding, the renormalisation is the
//    same sequence on both.
//  * experts: per element, the f32 error budget of the composition, from float64 sums over the
//    reference's operands (moe_reference below): each product 2e-6 sum|w x| (the project's f32
//    product bound, test_backend_ops.cpp), propagated through SwiGLU (|silu'| <= 1.1) and the down
//    product, plus 1e-6 relative for the exp / division ulps of silu and sigmoid, then the weighted
//    slot sum and the shared row. The CUDA comparison allows twice that (both sides err); the
//    float64 check allows it once. In the bf16 mode, a grouped step (> 64 pairs) whose D and F are
//    multiples of 128 runs its products on bf16 tensor cores (kernels/cuda/moe_gemm_tc.h): each
//    weight d*q, each x and each h element rounded to bf16 (2^-9 relative each, as the project
//    states it) before f32 accumulation, so each of the three products gets the dense bf16 bound of
//    test_backend_ops.cpp, 4e-3 A + (K/16 + 16) 17 2^-24 A over its K (D for gate / up, F for
//    down), in place of 2e-6 A, propagated the same way; the slot sum stays f32.
//  * batch invariance: a step's rows minus the same tokens run one at a time, bits (all zero): on
//    the CPU per-expert products do not depend on the batch; on CUDA both f32 regimes share one dot
//    and one combine sequence (the shapes of those cases are not the tensor cores', so the bf16
//    mode runs them in f32 too). In the bf16 tensor-core regime a token computed one by one
//    (gather, f32) differs from its batched bits, so there the case compares two grouped steps:
//    a token's rows in a step of 4200 pairs minus the same token in a step of 300 pairs, and in a
//    step of 32832 pairs (two tensor-core chunks, the second of 64 pairs: still grouped) minus a
//    step of 1200, bits: each mma column is one pair's, whatever shares its tile.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/backend_ops/backend_ops_cases.h"
#ifdef DELTASERVE_HAVE_CUDA
#include <chrono>
#include <set>

#include "kernels/cuda/device_info.h"
#include "worker/cuda_backend.h"
#endif

namespace ds::backend_ops {
namespace {

// ---- moe_route ----------------------------------------------------------------------------------

std::vector<float> ints_as_floats(const std::vector<int32_t>& v) {
  std::vector<float> f(v.size());
  std::memcpy(f.data(), v.data(), v.size() * sizeof(int32_t));
  return f;
}

// Router logits with exact ties: in every third token the largest logit is copied to another expert
// (the lower index must win), and in every fifth a whole block of experts shares one logit.
std::vector<float> route_logits(Rng& rng, size_t T, size_t E) {
  std::vector<float> l = rng.vec(T * E, -4, 4);
  for (size_t t = 0; t < T; ++t) {
    float* row = l.data() + t * E;
    const size_t top = static_cast<size_t>(std::max_element(row, row + E) - row);
    if (t % 3 == 0) row[(top + E / 2) % E] = row[top];
    if (t % 5 == 1) std::fill(row + E / 4, row + E / 4 + std::min<size_t>(E / 4, 12), 4.5f);
  }
  return l;
}

Case route_case(size_t E, size_t k, size_t T) {
  return {"moe_route", "E=" + std::to_string(E) + " k=" + std::to_string(k) + " T=" + std::to_string(T),
          [=](Backend& be, const Target&) {
            Rng rng(1300 + E + k + T);
            Dev d(be);
            const float* logits = d.put(route_logits(rng, T, E));
            auto* ids = reinterpret_cast<int32_t*>(d.alloc(T * k));
            float* w = d.alloc(T * k);
            be.moe_route(logits, T, E, k, ids, w);
            std::vector<int32_t> host_ids(T * k);
            be.synchronize();
            be.download(reinterpret_cast<float*>(host_ids.data()), reinterpret_cast<const float*>(ids), T * k);
            return Outs{
                bits("experts", ints_as_floats(host_ids), "both rank the same f32 logits, ties to the lower id"),
                rel("weights", d.get(w, T * k), 2e-6, "expf ulps and the softmax sum's order")};
          }};
}

// ---- moe_experts: inputs, float64 reference and allowance ----------------------------------------

struct MoeShape {
  size_t E = 0, k = 0, D = 0, F = 0, T = 0;
  bool shared = false;  // with the gated shared expert's rows
};

std::string shape_name(const MoeShape& s) {
  return "E=" + std::to_string(s.E) + " k=" + std::to_string(s.k) + " D=" + std::to_string(s.D) +
         " F=" + std::to_string(s.F) + " T=" + std::to_string(s.T) + (s.shared ? " shared" : "");
}

// Host inputs of one moe_experts call. x is scaled so the gate products are O(1) (both branches of
// SiLU matter); the k experts of a token are distinct, their weights positive and summing to 1.
struct MoeInputs {
  MoeShape s{};
  HostMatrix gate, up, down;
  std::vector<float> x, weights, shared, shared_gate;
  std::vector<int32_t> experts;
};

MoeInputs make_inputs(const MoeShape& s) {
  Rng rng(1400 + s.E * 3 + s.k * 5 + s.D + s.F * 7 + s.T);
  MoeInputs in;
  in.s = s;
  in.gate = make_matrix(GgmlType::Q8_0, s.E * s.F, s.D, rng);
  in.up = make_matrix(GgmlType::Q8_0, s.E * s.F, s.D, rng);
  in.down = make_matrix(GgmlType::Q8_0, s.E * s.D, s.F, rng);
  const float xs = 3.0f / std::sqrt(static_cast<float>(s.D));
  in.x = rng.vec(s.T * s.D, -xs, xs);
  for (size_t t = 0; t < s.T; ++t) {
    const std::vector<uint32_t> ids = distinct(rng, s.k, s.E);
    std::vector<float> w = rng.vec(s.k, 0.05f, 1.0f);
    float sum = 0;
    for (float v : w) sum += v;
    for (size_t j = 0; j < s.k; ++j) {
      in.experts.push_back(static_cast<int32_t>(ids[j]));
      in.weights.push_back(w[j] / sum);
    }
  }
  if (s.shared) {
    in.shared = rng.vec(s.T * s.D, -2, 2);
    in.shared_gate = rng.vec(s.T, -3, 3);
  }
  return in;
}

// The float64 value of every output element and its f32 error budget (the file header's bound).
struct MoeReference {
  std::vector<double> y, allowed;
};

constexpr double kProduct = 2e-6;  // f32 product bound per sum|w x| (test_backend_ops.cpp)
constexpr double kUlps = 1e-6;     // exp / division / multiply roundings, relative

// The bf16 tensor-core product bound per sum|w x| over K columns (test_backend_ops.cpp
// matmul_allowance: two bf16 operand roundings plus the f32 accumulation's).
double bf16_product(size_t K) {
  return 4e-3 + (static_cast<double>(K) / 16 + 16) * 17 * std::ldexp(1.0, -24);
}

// The product bounds of one moe_experts call: gate / up (K = D) and down (K = F).
struct ProductBounds {
  double gate_up = kProduct, down = kProduct;
};

// Whether the CUDA backend runs `s` on bf16 tensor cores for `target` (kernels/cuda/moe.h).
bool runs_bf16(const MoeShape& s, const Target& target) {
  return target.bf16_prefill && s.T * s.k > 64 && s.D % 128 == 0 && s.F % 128 == 0;
}

ProductBounds bounds_for(const MoeShape& s, const Target& target) {
  if (!runs_bf16(s, target)) return {};
  return {bf16_product(s.D), bf16_product(s.F)};
}

double silu(double g) {
  return g / (1 + std::exp(-g));
}

// One pair's SwiGLU activations h [F] and their error budget dh [F].
void pair_activations(const MoeInputs& in, size_t t, size_t e, double kp, std::vector<double>& h,
                      std::vector<double>& dh) {
  const size_t D = in.s.D, F = in.s.F;
  const float* x = in.x.data() + t * D;
  for (size_t r = 0; r < F; ++r) {
    const float* wg = in.gate.deq.data() + (e * F + r) * D;
    const float* wu = in.up.deq.data() + (e * F + r) * D;
    double g = 0, u = 0, ag = 0, au = 0;
    for (size_t c = 0; c < D; ++c) {
      g += double(wg[c]) * x[c], ag += std::fabs(double(wg[c]) * x[c]);
      u += double(wu[c]) * x[c], au += std::fabs(double(wu[c]) * x[c]);
    }
    h[r] = silu(g) * u;
    dh[r] = kp * (1.1 * ag * std::fabs(u) + std::fabs(silu(g)) * au) + kUlps * std::fabs(h[r]);
  }
}

MoeReference moe_reference(const MoeInputs& in, const ProductBounds& kp = {}) {
  const MoeShape& s = in.s;
  MoeReference ref;
  ref.y.assign(s.T * s.D, 0.0);
  ref.allowed.assign(s.T * s.D, 1e-30);
  std::vector<double> h(s.F), dh(s.F), sum_abs(s.T * s.D, 0.0);
  for (size_t t = 0; t < s.T; ++t) {
    for (size_t j = 0; j < s.k; ++j) {
      const size_t e = static_cast<size_t>(in.experts[t * s.k + j]);
      const double w = in.weights[t * s.k + j];
      pair_activations(in, t, e, kp.gate_up, h, dh);
      for (size_t r = 0; r < s.D; ++r) {
        const float* wd = in.down.deq.data() + (e * s.D + r) * s.F;
        double d = 0, ad = 0, prop = 0;
        for (size_t c = 0; c < s.F; ++c) {
          d += double(wd[c]) * h[c], ad += std::fabs(double(wd[c]) * h[c]), prop += std::fabs(double(wd[c])) * dh[c];
        }
        ref.y[t * s.D + r] += w * d;
        ref.allowed[t * s.D + r] += w * (kp.down * ad + prop);
        sum_abs[t * s.D + r] += std::fabs(w * d);
      }
    }
    for (size_t r = 0; r < s.D && s.shared; ++r) {
      const double g = 1 / (1 + std::exp(-double(in.shared_gate[t]))), v = g * in.shared[t * s.D + r];
      ref.y[t * s.D + r] += v;
      ref.allowed[t * s.D + r] += kUlps * std::fabs(v);
      sum_abs[t * s.D + r] += std::fabs(v);
    }
  }
  for (size_t i = 0; i < ref.y.size(); ++i) ref.allowed[i] += kProduct * sum_abs[i];  // the slot sum's roundings
  return ref;
}

// Runs moe_experts on `be` over tokens [t0, t0 + n) of `in` (host in, host out).
std::vector<float> run_experts(Backend& be, const MoeInputs& in, size_t t0, size_t n) {
  const MoeShape& s = in.s;
  Dev d(be);
  MoeExperts m;
  m.n_tokens = n;
  m.n_experts = s.E;
  m.k = s.k;
  m.gate_exps = be.weight(in.gate.t);
  m.up_exps = be.weight(in.up.t);
  m.down_exps = be.weight(in.down.t);
  const auto rows = [&](const std::vector<float>& v, size_t width) {
    return d.put(
        std::vector<float>(v.begin() + static_cast<long>(t0 * width), v.begin() + static_cast<long>((t0 + n) * width)));
  };
  m.x = rows(in.x, s.D);
  m.experts = reinterpret_cast<const int32_t*>(rows(ints_as_floats(in.experts), s.k));
  m.weights = rows(in.weights, s.k);
  if (s.shared) {
    m.shared = rows(in.shared, s.D);
    m.shared_gate = rows(in.shared_gate, 1);
  }
  m.y = d.alloc(n * s.D);
  be.moe_experts(m);
  return d.get(m.y, n * s.D);
}

Case experts_case(const MoeShape& s) {
  return {"moe_experts", shape_name(s), [=](Backend& be, const Target& target) {
            const MoeInputs in = make_inputs(s);
            const MoeReference ref = moe_reference(in, bounds_for(s, target));
            Out y{"y",
                  run_experts(be, in, 0, s.T),
                  Metric::kPerElement,
                  0,
                  ref.allowed,
                  runs_bf16(s, target)
                      ? "2x the bf16 tensor-core budget of the composition from float64 operand sums (file header)"
                      : "2x the f32 budget of the composition from float64 operand sums (file header)"};
            for (double& a : y.allowed) a *= 2;
            return Outs{y};
          }};
}

// The step's rows minus each token run alone: zero on every backend, bit for bit.
Case invariance_case(const MoeShape& s) {
  return {"moe_experts", shape_name(s) + " batched vs one by one", [=](Backend& be, const Target&) {
            const MoeInputs in = make_inputs(s);
            std::vector<float> diff = run_experts(be, in, 0, s.T);
            for (size_t t = 0; t < s.T; ++t) {
              const std::vector<float> one = run_experts(be, in, t, 1);
              for (size_t r = 0; r < s.D; ++r) diff[t * s.D + r] -= one[r];
            }
            return Outs{bits("batched - one by one", diff, "a token's bits do not depend on its step")};
          }};
}

// Tokens [t0, t0 + n) of a step of all in.s.T tokens minus the same tokens run as a step of their
// own (both grouped: > 64 pairs each), bits: the bf16 tensor-core regime's batch invariance.
Case step_invariance_case(const MoeShape& s, size_t n) {
  return {"moe_experts", shape_name(s) + " vs steps of " + std::to_string(n) + " tokens",
          [=](Backend& be, const Target&) {
            const MoeInputs in = make_inputs(s);
            const std::vector<float> all = run_experts(be, in, 0, s.T);
            std::vector<float> diff;
            for (const size_t t0 : {size_t{0}, s.T - n}) {  // the first and the last chunk's tokens
              const std::vector<float> part = run_experts(be, in, t0, n);
              for (size_t i = 0; i < n * s.D; ++i) diff.push_back(all[t0 * s.D + i] - part[i]);
            }
            return Outs{bits("big step - small step", diff, "a token's bits do not depend on its step")};
          }};
}

const std::vector<MoeShape>& expert_shapes() {
  static const std::vector<MoeShape> shapes = {
      {8, 2, 96, 64, 1, true},
      {8, 2, 96, 64, 3, false},
      {8, 2, 96, 64, 17, true},
      {8, 2, 96, 64, 300, true},
      {8, 2, 160, 512, 17, true},
      {8, 2, 512, 160, 40, false},
      {256, 8, 256, 96, 1, true},
      {256, 8, 256, 96, 3, true},
      {256, 8, 256, 96, 17, true},
      {256, 8, 256, 96, 300, true},
      {8, 4, 2048, 512, 1, true},
      {8, 4, 2048, 512, 17, true},
      {8, 2, 96, 64, 4200, true},  // 8400 pairs: past cuda::kMoeChunkPairs, two chunks on CUDA
      // D, F multiples of 128: the bf16 mode's tensor-core products (and {8, 4, 2048, 512, 17}):
      {8, 2, 256, 128, 300, true},    // GGUF-order rows, 75 pairs per expert: full and partial tiles
      {8, 2, 512, 512, 150, false},   // split rows on both matrices
      {256, 8, 256, 128, 40, true},   // 320 pairs over up to 256 experts: tiles of 1-3 pairs
      {8, 2, 256, 128, 4128, false},  // 8256 pairs: two f32 chunks, the second of 64 pairs (gather)

  };
  return shapes;
}

}  // namespace

void add_moe_cases(std::vector<Case>& cases) {
  for (const auto& [E, k, T] : std::vector<std::array<size_t, 3>>{
           {8, 2, 1}, {8, 2, 300}, {256, 8, 1}, {256, 8, 3}, {256, 8, 17}, {256, 8, 300}, {512, 10, 17}}) {
    cases.push_back(route_case(E, k, T));
  }
  for (const MoeShape& s : expert_shapes()) cases.push_back(experts_case(s));
  cases.push_back(invariance_case({256, 8, 256, 96, 17, true}));  // grouped (136 pairs) vs gather (8)
  cases.push_back(invariance_case({8, 2, 96, 64, 40, true}));     // grouped (80 pairs) vs gather (2)
  // Tensor cores in the bf16 mode, the f32 tiles otherwise: 4200 pairs vs 300; 32832 pairs (on
  // tensor cores two chunks, the second of 64 pairs) vs 1200.
  cases.push_back(step_invariance_case({8, 2, 256, 128, 2100, true}, 150));
  cases.push_back(step_invariance_case({16, 8, 128, 128, 4104, false}, 150));
}

namespace {

// ---- CPU only: moe_experts against the float64 formula -------------------------------------------
TEST(BackendOpsMoe, CpuExpertsMatchFloat64) {
  const std::unique_ptr<Backend> be = make_cpu_backend(2);
  for (const MoeShape& s : expert_shapes()) {
    const MoeInputs in = make_inputs(s);
    const MoeReference ref = moe_reference(in);
    const std::vector<float> y = run_experts(*be, in, 0, s.T);
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(y[i] - ref.y[i]) / ref.allowed[i]);
    EXPECT_LE(worst, 1.0) << shape_name(s) << ": worst error / f32 budget";
    std::printf("[ margin ] moe_experts [%s] cpu vs float64: worst error / budget %.3g\n", shape_name(s).c_str(),
                worst);
  }
}

TEST(BackendOpsMoe, CpuRejectsBadExpertIds) {
  const std::unique_ptr<Backend> be = make_cpu_backend(1);
  MoeInputs in = make_inputs({8, 2, 96, 64, 3, false});
  in.experts[3] = 8;
  EXPECT_THROW(run_experts(*be, in, 0, 3), std::invalid_argument);
}

#ifdef DELTASERVE_HAVE_CUDA
// ---- CUDA timing on the 35B-A3B expert shape (not a check; run by hand on a GPU) -----------------
// --gtest_also_run_disabled_tests --gtest_filter='*Timing*': microseconds per moe_experts call and
// the expert bytes it reads per second (each selected expert's three matrices once: the
// bandwidth bound of the gather regime; the grouped regime re-reads an expert's rows per tile).

// Random Q8_0 rows written directly (scale 1/64, quants in [-64, 64)): quantizing 800M floats
// would take longer than the timing.
HostMatrix random_q8(size_t rows, size_t cols, uint64_t seed) {
  HostMatrix m;
  m.rows = rows, m.cols = cols;
  const size_t blocks = rows * cols / 32;
  m.bytes.resize(blocks * 34);
  uint64_t z = seed;
  for (size_t b = 0; b < blocks; ++b) {
    uint8_t* blk = m.bytes.data() + b * 34;
    blk[0] = 0x00, blk[1] = 0x24;  // fp16 1/64
    for (int i = 0; i < 32; ++i) {
      z = z * 6364136223846793005ull + 1442695040888963407ull;
      blk[2 + i] = static_cast<uint8_t>((z >> 33) % 128) - 64;
    }
  }
  m.t.name = "w";
  m.t.n_dims = 2;
  m.t.ne = {cols, rows, 1, 1};
  m.t.type = GgmlType::Q8_0;
  m.t.nbytes = m.bytes.size();
  m.t.data = m.bytes.data();
  return m;
}

TEST(BackendOpsMoe, DISABLED_CudaTiming35bA3b) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const size_t E = 256, k = 8, D = 2048, F = 512;
  const HostMatrix gate = random_q8(E * F, D, 1), up = random_q8(E * F, D, 2), down = random_q8(E * D, F, 3);
  // MOE_TIMING_F32=1: the f32 prefill mode (the f32 tiles of the grouped regime) instead of bf16.
  const bool f32 = std::getenv("MOE_TIMING_F32") != nullptr;
  const std::unique_ptr<Backend> be = make_cuda_backend(0, CudaBackendOptions{.bf16_prefill = !f32});
  Rng rng(5);
  for (const size_t T : {1, 2, 4, 8, 64, 512, 2048, 8192}) {
    MoeInputs in;
    in.s = {E, k, D, F, T, true};
    in.x = rng.vec(T * D, -0.05f, 0.05f);
    std::set<int32_t> used;
    for (size_t t = 0; t < T; ++t) {
      for (const uint32_t e : distinct(rng, k, E)) in.experts.push_back(static_cast<int32_t>(e)), used.insert(e);
      for (size_t j = 0; j < k; ++j) in.weights.push_back(1.0f / k);
    }
    in.shared = rng.vec(T * D);
    in.shared_gate = rng.vec(T);
    Dev d(*be);
    MoeExperts m;
    m.n_tokens = T, m.n_experts = E, m.k = k;
    m.gate_exps = be->weight(gate.t), m.up_exps = be->weight(up.t), m.down_exps = be->weight(down.t);
    m.x = d.put(in.x);
    m.experts = reinterpret_cast<const int32_t*>(d.put(ints_as_floats(in.experts)));
    m.weights = d.put(in.weights);
    m.shared = d.put(in.shared);
    m.shared_gate = d.put(in.shared_gate);
    m.y = d.alloc(T * D);
    for (int i = 0; i < 3; ++i) be->moe_experts(m);  // warm up (scratch growth)
    be->synchronize();
    constexpr int kReps = 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) be->moe_experts(m);
    be->synchronize();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kReps;
    const double bytes = static_cast<double>(used.size()) * (2.0 * F * (D / 32 * 34) + D * (F / 32 * 34));
    const double tflops = 6.0 * static_cast<double>(T * k * D * F) / us * 1e-6;
    std::printf(
        "[ timing ] moe_experts 35B-A3B %s T=%zu (%zu experts): %.1f us, %.0f GB/s of expert bytes, %.0f TFLOP/s\n",
        f32 ? "f32" : "bf16", T, used.size(), us, bytes / us * 1e-3, tflops);
  }
}
#endif

}  // namespace
}  // namespace ds::backend_ops
