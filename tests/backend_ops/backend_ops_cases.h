// The case table of test_backend_ops (see test_backend_ops.cpp for the design and the bounds):
// one Case per op and shape, whose run() fills seeded random inputs into host buffers, runs the op
// on the given Backend (through alloc / upload / download) and returns its named outputs, each
// with the bound it is held to against the CPU backend and a one-line reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/gguf.h"
#include "tests/kernels/kernel_test_util.h"
#include "worker/backend.h"

namespace ds::backend_ops {

using ::ds::cpu::test::Rng;

// What the compared (CUDA) backend runs; the CPU reference run sees it too, to state the bounds.
struct Target {
  const char* name;
  bool bf16_prefill;  // CudaBackendOptions::bf16_prefill
  bool ablated;       // CudaAblations: the fused decode ops, stacks, prefill fusions, split rows and the
                      // device digest off (the separate ops and GGUF-order uploads they replace)
};

enum class Metric {
  kBits,        // memcmp equality
  kRelMax,      // max_i |got_i - ref_i| / max_i |ref_i| <= tol
  kPerElement,  // |got_i - ref_i| <= allowed_i for every i (allowed from the reference's operands)
};

struct Out {
  std::string name;
  std::vector<float> v;
  Metric metric = Metric::kBits;
  double tol = 0;
  std::vector<double> allowed;  // kPerElement only
  std::string why;
};
using Outs = std::vector<Out>;

inline Out bits(std::string name, std::vector<float> v, std::string why) {
  return {std::move(name), std::move(v), Metric::kBits, 0, {}, std::move(why)};
}
inline Out rel(std::string name, std::vector<float> v, double tol, std::string why) {
  return {std::move(name), std::move(v), Metric::kRelMax, tol, {}, std::move(why)};
}

struct Case {
  std::string op, shape;
  std::function<Outs(Backend&, const Target&)> run;
};

// n distinct values in [0, range), shuffled (pool rows, block ids).
inline std::vector<uint32_t> distinct(Rng& rng, size_t n, size_t range) {
  std::vector<uint32_t> v(range);
  for (size_t i = 0; i < range; ++i) v[i] = static_cast<uint32_t>(i);
  for (size_t i = range - 1; i > 0; --i) std::swap(v[i], v[static_cast<size_t>(rng.integer(0, static_cast<int>(i)))]);
  v.resize(n);
  return v;
}

// Backend buffers released at scope end.
class Dev {
 public:
  explicit Dev(Backend& backend) : be(backend) {}
  ~Dev() {
    for (float* p : ptrs_) be.release(p);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  float* alloc(size_t n) {
    ptrs_.push_back(be.alloc(n));
    return ptrs_.back();
  }
  float* put(const std::vector<float>& h) {
    float* p = alloc(h.size());
    be.upload(p, h.data(), h.size());
    return p;
  }
  std::vector<float> get(const float* p, size_t n) {
    be.synchronize();
    std::vector<float> h(n);
    be.download(h.data(), p, n);
    return h;
  }
  Backend& be;

 private:
  std::vector<float*> ptrs_;
};

// A weight matrix in host memory, wrapped as the GgufTensor a backend uploads (Backend::weight).
struct HostMatrix {
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // the dequantized rows [rows][cols] (the reference's operands)
  GgufTensor t;
  size_t rows = 0, cols = 0;
};
// Q8_0 by common/gguf_writer.h quantize_q8_0 (cols % 32 == 0), or F32.
HostMatrix make_matrix(GgmlType type, size_t rows, size_t cols, Rng& rng);
// The parts' rows stacked into one matrix (same type and width).
HostMatrix stack_matrices(const std::vector<const HostMatrix*>& parts);

// The per-element allowance of an n-token product y = W x on `target` (x rows at stride xs):
// see the header of test_backend_ops.cpp. `why` receives the reason.
std::vector<double> matmul_allowance(const HostMatrix& w, const std::vector<float>& x, size_t xs, size_t n,
                                     const Target& target, std::string* why);
Out product_out(std::string name, std::vector<float> y, const HostMatrix& w, const std::vector<float>& x, size_t xs,
                size_t n, size_t ys, const Target& target);

void add_core_cases(std::vector<Case>& cases);       // test_backend_ops.cpp
void add_attention_cases(std::vector<Case>& cases);  // test_backend_ops_gdn.cpp
void add_gdn_cases(std::vector<Case>& cases);        // test_backend_ops_gdn.cpp
void add_kv_cases(std::vector<Case>& cases);         // test_backend_ops_kv.cpp
void add_vision_cases(std::vector<Case>& cases);     // test_backend_ops_vision.cpp
void add_moe_cases(std::vector<Case>& cases);        // test_backend_ops_moe.cpp

// CPU-only self-consistency checks of the composite ops (test_backend_ops_gdn.cpp).
void expect_gdn_mix_equals_token_by_token(Backend& be);

}  // namespace ds::backend_ops
