// CPU backend: host memory, ops from kernels/cpu. Weights are used straight from the mmap.
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "common/gguf.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/conv1d.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/backend.h"

namespace ds {
namespace {

// The CPU backend runs the token-by-token GDN recurrence for prefill too: at the head sizes
// the CPU serves it is as fast as the chunked form, and it makes every token's arithmetic
// independent of how the prompt was split into steps. With the batch-independent matmul and
// attention kernels, a replay after a worker crash (one big prefill) then reproduces the
// original run (prefill + single-token decodes) bit for bit. The chunked form stays the
// tested reference for the GPU's chunked kernels.
constexpr bool kGdnUseChunked = false;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads) : pool_(n_threads) {}
  ~CpuBackend() override {
    for (auto& [p, size] : allocations_) std::free(p);
  }

  const char* name() const override { return "cpu"; }

  float* alloc(size_t n) override {
    void* p = std::calloc(n == 0 ? 1 : n, sizeof(float));
    if (p == nullptr) throw std::bad_alloc();
    allocations_[p] = n;
    return static_cast<float*>(p);
  }
  void release(float* p) override {
    if (p == nullptr) return;
    allocations_.erase(p);
    std::free(p);
  }
  void upload(float* dst, const float* src, size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void download(float* dst, const float* src, size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void copy(float* dst, const float* src, size_t n) override { std::memmove(dst, src, n * sizeof(float)); }
  void zero(float* dst, size_t n) override { std::memset(dst, 0, n * sizeof(float)); }

  WeightView weight(const GgufTensor& t) override {
    WeightView w;
    w.type = t.type;
    w.data = t.data;
    w.cols = t.ne[0];
    w.rows = t.n_rows();
    w.row_bytes = t.row_bytes();
    return w;
  }
  const float* f32_tensor(const GgufTensor& t) override {
    auto it = small_tensors_.find(t.data);
    if (it != small_tensors_.end()) return it->second.data();
    std::vector<float> v(t.n_elements());
    dequantize_row(t.type, t.data, v.data(), v.size());
    return small_tensors_.emplace(t.data, std::move(v)).first->second.data();
  }

  void embed_rows(const WeightView& table, const int32_t* ids, size_t n, float* out) override {
    cpu::embed_rows(table, ids, n, out);
  }
  void matmul(const WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys) override {
    cpu::matmul(w, x, xs, n, y, ys, &pool_);
  }
  void rms_norm(const float* x, size_t xs, const float* w, float eps, size_t rows, size_t dim, float* y,
                size_t ys) override {
    cpu::rms_norm(x, xs, w, eps, rows, dim, y, ys);
  }
  void gated_rms_norm(const float* o, const float* z, const float* w, float eps, size_t rows, size_t dim,
                      float* y) override {
    cpu::gated_rms_norm(o, z, w, eps, rows, dim, y);
  }
  void l2_norm(const float* x, size_t xs, float eps, size_t rows, size_t dim, float* y, size_t ys) override {
    cpu::l2_norm(x, xs, eps, rows, dim, y, ys);
  }
  void rope_neox(float* x, size_t n_tokens, size_t ts, size_t n_heads, size_t hs, size_t head_dim, size_t n_rot,
                 const int32_t* positions, std::array<int32_t, 4> sections, float theta) override {
    cpu::rope_neox(x, n_tokens, ts, n_heads, hs, head_dim, n_rot, positions, sections, theta);
  }
  void causal_conv1d_silu(const float* x, size_t xs, size_t n_tokens, size_t channels, const float* w, size_t kernel,
                          float* state, float* y) override {
    cpu::causal_conv1d_silu(x, xs, n_tokens, channels, w, kernel, state, y);
  }
  void gdn_gates(const float* alpha, size_t as, const float* beta_raw, size_t bs, const float* a, const float* dt_bias,
                 size_t n_tokens, size_t nv, float* g, float* beta) override {
    for (size_t t = 0; t < n_tokens; ++t) {
      for (size_t n = 0; n < nv; ++n) {
        g[t * nv + n] = a[n] * cpu::softplus(alpha[t * as + n] + dt_bias[n]);
        beta[t * nv + n] = cpu::sigmoid(beta_raw[t * bs + n]);
      }
    }
  }
  void gdn(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
           float* state, float* out) override {
    if (kGdnUseChunked && s.n_tokens > 1) {
      cpu::gdn_chunked(s, q, k, v, g, beta, state, out, 64, &pool_);
    } else {
      cpu::gdn_recurrent(s, q, k, v, g, beta, state, out, &pool_);
    }
  }
  void attention_causal(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out) override {
    cpu::attention_causal(s, q, kv, scale, out, &pool_);
  }
  void swiglu(const float* gate, const float* up, size_t n, float* y) override { cpu::swiglu(gate, up, n, y); }
  void sigmoid_gate(const float* x, size_t xs, const float* gate, size_t gs, size_t rows, size_t dim, float* y,
                    size_t ys) override {
    cpu::sigmoid_gate(x, xs, gate, gs, rows, dim, y, ys);
  }
  void add_inplace(float* y, const float* x, size_t n) override { cpu::add_inplace(y, x, n); }
  void moe_route(const float* logits, size_t n_tokens, size_t n_experts, size_t k, int32_t* experts,
                 float* weights) override {
    cpu::moe_route(logits, n_tokens, n_experts, k, experts, weights);
  }
  void moe_experts(const MoeExperts& m) override { cpu::moe_experts(m, &pool_); }
  // ---- encoder ops (the vision tower) ----
  void layer_norm(const float* x, size_t xs, const float* w, const float* b, float eps, size_t rows, size_t dim,
                  float* y, size_t ys) override {
    cpu::layer_norm(x, xs, w, b, eps, rows, dim, y, ys);
  }
  void gelu(GeluKind kind, const float* x, size_t n, float* y) override { cpu::gelu(kind, x, n, y); }
  void add_bias(float* y, size_t ys, size_t rows, size_t dim, const float* bias) override {
    cpu::add_bias(y, ys, rows, dim, bias);
  }
  void rope_2d(float* x, size_t n_tokens, size_t ts, size_t n_heads, size_t hs, size_t head_dim,
               const int32_t* positions, float theta) override {
    cpu::rope_2d(x, n_tokens, ts, n_heads, hs, head_dim, positions, theta);
  }
  void attention_segments(const SegmentAttention& a) override { cpu::attention_segments(a, &pool_); }
  void edit_logits(float* logits, size_t n_rows, size_t n_vocab, const LogitEdit* edits, size_t n_edits) override {
    apply_logit_edits(logits, n_rows, n_vocab, edits, n_edits);
  }
  void mask_logits(float* logits, size_t n_rows, size_t n_vocab, const TokenMasks& masks) override {
    apply_token_masks(logits, n_rows, n_vocab, masks);
  }
  void gather_rows(const float* src, const uint32_t* rows, size_t n_rows, size_t dim, float* dst) override {
    for (size_t i = 0; i < n_rows; ++i) std::memcpy(dst + i * dim, src + size_t{rows[i]} * dim, dim * sizeof(float));
  }
  void kv_write(KvType t, const float* src, const uint32_t* rows, size_t n_rows, size_t n, void* pool) override {
    cpu::kv_write_rows(t, src, n, rows, n_rows, n, pool);
  }
  void hadamard_heads(float* x, size_t n_rows, size_t row_stride, size_t n_heads, size_t head_stride,
                      size_t head_dim) override {
    cpu::hadamard_heads(x, n_rows, row_stride, n_heads, head_stride, head_dim);
  }
  void synchronize() override {}

 private:
  cpu::ThreadPool pool_;
  std::map<void*, size_t> allocations_;
  std::map<const void*, std::vector<float>> small_tensors_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  return std::make_unique<CpuBackend>(n_threads);
}

}  // namespace ds
