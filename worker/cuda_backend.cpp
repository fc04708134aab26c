// CUDA backend: host C++ over the launchers of kernels/cuda (no device code here, so it builds with the project's
// C++ standard and warning set). One stream; ops queue work on it and only download() and synchronize() wait. Small
// host control arrays (token ids, positions, row indices) go through grow-only device buffers; the model's Workspace
// holds everything else, so the step path allocates nothing once the buffers have grown.
#include "worker/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "common/gguf.h"
#include "common/q8_split.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/attention_prefill.h"
#include "kernels/cuda/attention_prep.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/conv_l2_decode.h"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gdn.h"
#include "kernels/cuda/gdn_chunked.h"
#include "kernels/cuda/kv_codec.h"
#include "kernels/cuda/l2_norm_heads.h"
#include "kernels/cuda/logit_digest.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matmul_fast.h"  // kGemvSplitBestTokens
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/stream_signal.h"
#include "kernels/cuda/swiglu_matmul.h"
#include "worker/cuda_backend_moe.h"
#include "worker/cuda_buffers.h"

namespace ds {
namespace {

using cuda_buffers::ControlBuffer;
using cuda_buffers::DeviceScratch;
using cuda_buffers::PinnedScratch;

class CudaBackend final : public CudaMoeOps {  // encoder and MoE ops: worker/cuda_backend_{encoder,moe}.h
 public:
  CudaBackend(int device, const CudaBackendOptions& options, const CudaAblations& ablations)
      : device_(device),
        precision_(options.bf16_prefill ? cuda::MatmulPrecision::kBf16TensorCores : cuda::MatmulPrecision::kF32),
        tc_{.kernel = ablations.prefill_gemm == CudaAblations::PrefillGemm::kCublasLt ? cuda::TcGemmKernel::kCublasLt
                                                                                      : cuda::TcGemmKernel::kMmaSync,
            .bf16_weights = nullptr,
            .split_small = ablations.split_small,
            .split_gemv_mma = options.split_gemv_mma},
        bf16_weight_copy_(options.bf16_weight_copy),
        device_digest_(ablations.device_logit_digest),
        fused_ops_(ablations.fused_decode_ops),
        stacked_weights_(ablations.stacked_weights),
        gdn_math_(options.bf16_prefill && ablations.gdn_tensor_cores ? cuda::GdnMath::kTensorCores
                                                                     : cuda::GdnMath::kF32),
        prefill_fusions_(ablations.prefill_fusions),
        q8_split_(ablations.q8_split),
        decode_pdl_(ablations.decode_pdl) {
    const int n = cuda::device_count();
    if (device < 0 || device >= n) {
      throw std::runtime_error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) +
                               " visible)");
    }
    DS_CUDA_CHECK(cudaSetDevice(device_));
    DS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    bind_op_streams(device_, stream_, precision_);
    // The small decode ops (norms, activations, conv, decode attention, gather/scatter, digest)
    // follow the GEMV's switch (kernels/cuda/dependent_launch.h).
    cuda::set_dependent_launches(stream_, decode_pdl_);
    // The GEMM library's handle and workspace now, not inside the first prefill step.
    if (precision_ == cuda::MatmulPrecision::kBf16TensorCores && tc_.kernel == cuda::TcGemmKernel::kCublasLt) {
      DS_CUDA_CHECK(cuda::prepare_tc_gemm(stream_));
    }
  }
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }

  // ---- memory ---------------------------------------------------------------------------------
  float* alloc(size_t n) override;
  void release(float* p) override;
  void upload(float* dst, const float* src, size_t n) override {
    on_device();
    DS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }
  void download(float* dst, const float* src, size_t n) override {
    on_device();
    DS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    DS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // The copy and then the word, both queued: the host moves on (the next stage's device waits
  // on the word). Without stream memory operations: download() then a host store.
  void download_signalled(float* dst, const float* src, size_t n, const HostSignal& done) override {
    on_device();
    DS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    if (cuda::stream_write_host_word(stream_, done.word, done.value) == cudaSuccess) return;
    cudaGetLastError();
    DS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    done.set();
  }
  // The device waits in its stream; the host goes on queuing the step. Without stream memory
  // operations the host waits instead.
  void wait_host_signal(const HostSignal& ready) override {
    on_device();
    if (ready.landed() || cuda::stream_wait_host_word(stream_, ready.word, ready.value) == cudaSuccess) return;
    cudaGetLastError();
    ready.wait();
  }
  void copy(float* dst, const float* src, size_t n) override {
    on_device();
    DS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  }
  void zero(float* dst, size_t n) override {
    on_device();
    DS_CUDA_CHECK(cudaMemsetAsync(dst, 0, n * sizeof(float), stream_));
  }
  WeightView weight(const GgufTensor& t) override;
  WeightView weight_stack(const GgufTensor* const* parts, size_t n_parts) override;
  const float* f32_tensor(const GgufTensor& t) override;

  // ---- ops ------------------------------------------------------------------------------------
  void embed_rows(const WeightView& table, const int32_t* host_ids, size_t n, float* out) override;
  void matmul(const WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys) override;
  void matmul_rows(const WeightView& w, const float* x, size_t xs, size_t n, const RowOutput* outs,
                   size_t n_outs) override;
  // The small-batch GEMM over split rows writes a stack's row segments in one pass (matmul_rows).
  // Up to kStackMaxTokens only: fewer launches help small steps; the stacks' K splits and waves lose
  // at larger ones (measured: docs/PERFORMANCE.md, Decisions measured, stacked products).
  // Prefill steps (past the small-batch GEMM) use the stacks too: each part is still its own
  // tensor-core GEMM (same bits), but the activations are rounded to bf16 once per stack instead
  // of once per part (cuda::matmul_rows).
  static constexpr size_t kStackMaxTokens = 16;
  bool stacks_multi_token(size_t n) const override {
    // 2..4 tokens (verify rows): the split-rows GEMV over the stack, the bits of each part's own
    // GEMV in fewer launches (without it a verify row of 1+3 issues about twice a decode step's
    // GEMV launches).
    if (n <= cuda::detail::kGemvSplitBestTokens) return q8_split_ && n >= 2;
    if (precision_ != cuda::MatmulPrecision::kBf16TensorCores) return false;
    const bool small_batch = q8_split_ && tc_.split_small && n <= kStackMaxTokens;
    return small_batch || n > (tc_.split_small ? cuda::detail::kSplitSmallMaxTokens : cuda::kTcMinTokens - 1);
  }
  void rms_norm(const float* x, size_t xs, const float* w, float eps, size_t rows, size_t dim, float* y,
                size_t ys) override {
    on_device();
    DS_CUDA_CHECK(cuda::rms_norm(x, xs, w, eps, rows, dim, y, ys, stream_));
  }
  void gated_rms_norm(const float* o, const float* z, const float* w, float eps, size_t rows, size_t dim,
                      float* y) override {
    on_device();
    DS_CUDA_CHECK(cuda::gated_rms_norm(o, z, w, eps, rows, dim, y, stream_));
  }
  void l2_norm(const float* x, size_t xs, float eps, size_t rows, size_t dim, float* y, size_t ys) override {
    on_device();
    DS_CUDA_CHECK(cuda::l2_norm(x, xs, eps, rows, dim, y, ys, stream_));
  }
  void l2_norm_heads(float* x, size_t token_stride, size_t n_tokens, size_t n_heads, size_t dim, float eps) override {
    if (!prefill_fusions_ || dim > cuda::kL2HeadsMaxDim) {
      Backend::l2_norm_heads(x, token_stride, n_tokens, n_heads, dim, eps);
      return;
    }
    on_device();
    DS_CUDA_CHECK(cuda::l2_norm_heads(x, token_stride, n_tokens, n_heads, dim, eps, stream_));
  }
  void rope_neox(float* x, size_t n_tokens, size_t ts, size_t n_heads, size_t hs, size_t head_dim, size_t n_rot,
                 const int32_t* host_positions, std::array<int32_t, 4> sections, float theta) override;
  void causal_conv1d_silu(const float* x, size_t xs, size_t n_tokens, size_t channels, const float* w, size_t kernel,
                          float* state, float* y) override {
    on_device();
    DS_CUDA_CHECK(cuda::causal_conv1d_silu(x, xs, n_tokens, channels, w, kernel, state, y, stream_));
  }
  void gdn_gates(const float* alpha, size_t as, const float* beta_raw, size_t bs, const float* a, const float* dt_bias,
                 size_t n_tokens, size_t nv, float* g, float* beta) override {
    on_device();
    DS_CUDA_CHECK(cuda::gdn_gates(alpha, as, beta_raw, bs, a, dt_bias, n_tokens, nv, g, beta, stream_));
  }
  void gdn(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
           float* state, float* out) override;
  // One launch of the decode recurrence over the row's tokens, captures written from registers.
  void gdn_captured(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, float* state, float* out, size_t n_captures, float* captures,
                    size_t capture_stride) override;
  void gdn_captured(const GdnShape& s, const float* q, const float* k, const float* v, const GdnRawGates& gates,
                    float* state, float* out, size_t n_captures, float* captures, size_t capture_stride) override;
  void attention_causal(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out) override;
  void attention_batch(const AttentionBatch& b) override;
  void attention_prep(const AttentionPrep& p) override;
  void swiglu(const float* gate, const float* up, size_t n, float* y) override {
    on_device();
    DS_CUDA_CHECK(cuda::swiglu(gate, up, n, y, stream_));
  }
  // Prefill steps on the bf16 tensor cores: the SwiGLU rounded straight into the GEMM's operand
  // (kernels/cuda/swiglu_matmul.h, same bits); everything else: the two ops.
  void swiglu_matmul(float* gate, const float* up, size_t n, const WeightView& w, float* y, size_t ys) override {
    // Decode steps: the SwiGLU folded into the split-rows GEMV's activation loads (same bits).
    if (fused_ops_) {
      on_device();
      void* acts = tc_.split_gemv_mma ? act_scratch_.get(cuda::matmul_swiglu_act_bytes(w.cols), stream_) : nullptr;
      const cudaError_t e = cuda::matmul_swiglu_decode(w, gate, up, w.cols, n, y, ys, tc_options(w, n), stream_, acts);
      if (e != cudaErrorNotSupported) {
        DS_CUDA_CHECK(e);
        return;
      }
    }
    // In the small-batch GEMM's range the unfused ops win: the down projection then streams
    // Q8_0 on that kernel instead of a bf16 dequantization pass.
    if (!prefill_fusions_ || precision_ != cuda::MatmulPrecision::kBf16TensorCores ||
        !cuda::swiglu_matmul_applies(w, n) || takes_split_small(w, n)) {
      Backend::swiglu_matmul(gate, up, n, w, y, ys);
      return;
    }
    on_device();
    DS_CUDA_CHECK(cuda::swiglu_matmul(w, gate, up, n, y, ys, tc_options(w, n), stream_));
  }
  void sigmoid_gate(const float* x, size_t xs, const float* gate, size_t gs, size_t rows, size_t dim, float* y,
                    size_t ys) override {
    on_device();
    DS_CUDA_CHECK(cuda::sigmoid_gate(x, xs, gate, gs, rows, dim, y, ys, stream_));
  }
  void add_inplace(float* y, const float* x, size_t n) override {
    on_device();
    DS_CUDA_CHECK(cuda::add_inplace(y, x, n, stream_));
  }
  void add_rms_norm(float* x, const float* delta, const float* w, float eps, size_t n_rows, size_t dim,
                    float* y) override {
    if (!fused_ops_) return Backend::add_rms_norm(x, delta, w, eps, n_rows, dim, y);
    on_device();
    DS_CUDA_CHECK(cuda::add_rms_norm(x, delta, w, eps, n_rows, dim, y, stream_));
  }
  void conv_silu_l2_token(const float* x, size_t channels, const float* w, size_t kernel, float* state,
                          size_t n_norm_heads, size_t head_dim, float eps, float* y) override {
    if (!fused_ops_ || !cuda::conv_silu_l2_token_applies(channels, kernel, n_norm_heads, head_dim)) {
      return Backend::conv_silu_l2_token(x, channels, w, kernel, state, n_norm_heads, head_dim, eps, y);
    }
    on_device();
    DS_CUDA_CHECK(cuda::conv_silu_l2_token(x, channels, w, kernel, state, n_norm_heads, head_dim, eps, y, stream_));
  }
  // The fused conv kernel for a sequence with a conv window (the multi-token and multi-sequence
  // forms need one); otherwise the Backend defaults run the separate ops.
  bool fused_conv_with_state(size_t channels, size_t kernel, size_t n_norm_heads, size_t head_dim) const {
    return fused_ops_ && kernel >= 2 && cuda::conv_silu_l2_token_applies(channels, kernel, n_norm_heads, head_dim);
  }
  // A verify row's tokens in one launch, windows captured from registers.
  void conv_silu_l2_captured(const float* x, size_t channels, size_t n_tokens, const float* w, size_t kernel,
                             float* state, size_t n_norm_heads, size_t head_dim, float eps, float* y, size_t n_captures,
                             float* captures, size_t capture_stride) override {
    if (!fused_conv_with_state(channels, kernel, n_norm_heads, head_dim)) {
      return Backend::conv_silu_l2_captured(x, channels, n_tokens, w, kernel, state, n_norm_heads, head_dim, eps, y,
                                            n_captures, captures, capture_stride);
    }
    on_device();
    DS_CUDA_CHECK(cuda::conv_silu_l2_captured(x, channels, n_tokens, w, kernel, state, n_norm_heads, head_dim, eps, y,
                                              n_captures, captures, capture_stride, stream_));
  }
  // All decode sequences in one launch each (the slot list is the same for every GDN layer of a
  // step, so its upload is skipped after the first layer).
  void conv_silu_l2_slots(const float* x, size_t channels, const float* w, size_t kernel, float* state0,
                          size_t slot_stride, const uint32_t* host_slots, size_t n_seqs, size_t n_norm_heads,
                          size_t head_dim, float eps, float* y) override {
    if (!fused_conv_with_state(channels, kernel, n_norm_heads, head_dim)) {
      return Backend::conv_silu_l2_slots(x, channels, w, kernel, state0, slot_stride, host_slots, n_seqs, n_norm_heads,
                                         head_dim, eps, y);
    }
    on_device();
    const auto* slots = static_cast<const uint32_t*>(slots_.put(host_slots, n_seqs * sizeof(uint32_t), stream_));
    DS_CUDA_CHECK(cuda::conv_silu_l2_slots(x, channels, w, kernel, state0, slot_stride, slots, n_seqs, n_norm_heads,
                                           head_dim, eps, y, stream_));
  }
  void gdn_decode_slots(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                        const float* beta, float* state0, size_t slot_stride, const uint32_t* host_slots, size_t n_seqs,
                        float* out) override {
    if (!fused_ops_ || !cuda::gdn_decode_slots_applies(s, n_seqs)) {
      return Backend::gdn_decode_slots(s, q, k, v, g, beta, state0, slot_stride, host_slots, n_seqs, out);
    }
    on_device();
    const auto* slots = static_cast<const uint32_t*>(slots_.put(host_slots, n_seqs * sizeof(uint32_t), stream_));
    DS_CUDA_CHECK(cuda::gdn_decode_slots(s, q, k, v, g, beta, state0, slot_stride, slots, n_seqs, out, stream_));
  }
  // The gates inside the recurrence's launch; unfused: the gates kernel into scratch, then the
  // sequences one by one (what the form above does unfused).
  void gdn_decode_slots(const GdnShape& s, const float* q, const float* k, const float* v, const GdnRawGates& gates,
                        float* state0, size_t slot_stride, const uint32_t* host_slots, size_t n_seqs,
                        float* out) override {
    on_device();
    if (!fused_ops_ || !cuda::gdn_decode_slots_applies(s, n_seqs)) {
      const size_t n_gates = n_seqs * s.n_v_heads;
      auto* g = static_cast<float*>(gate_scratch_.get(2 * n_gates * sizeof(float), stream_));
      gdn_gates(gates.alpha, gates.alpha_stride, gates.beta_raw, gates.beta_stride, gates.a, gates.dt_bias, n_seqs,
                s.n_v_heads, g, g + n_gates);
      return Backend::gdn_decode_slots(s, q, k, v, g, g + n_gates, state0, slot_stride, host_slots, n_seqs, out);
    }
    const auto* slots = static_cast<const uint32_t*>(slots_.put(host_slots, n_seqs * sizeof(uint32_t), stream_));
    DS_CUDA_CHECK(cuda::gdn_decode_slots(s, q, k, v, gates, state0, slot_stride, slots, n_seqs, out, stream_));
  }

  void gather_rows(const float* src, const uint32_t* host_rows, size_t n_rows, size_t dim, float* dst) override;
  void kv_write(KvType t, const float* src, const uint32_t* host_rows, size_t n_rows, size_t n, void* pool) override;
  void hadamard_heads(float* x, size_t n_rows, size_t row_stride, size_t n_heads, size_t head_stride,
                      size_t head_dim) override {
    on_device();
    DS_CUDA_CHECK(cuda::hadamard_heads(x, n_rows, row_stride, n_heads, head_stride, head_dim, stream_));
  }
  void synchronize() override {
    on_device();
    DS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  bool digest_logits_rows(const float* logits, size_t n_rows, size_t n_vocab, const DigestRequest* requests,
                          LogitDigest* out) override;
  void edit_logits(float* logits, size_t n_rows, size_t n_vocab, const LogitEdit* edits, size_t n_edits) override;
  void mask_logits(float* logits, size_t n_rows, size_t n_vocab, const TokenMasks& masks) override;

 private:
  // Several backends (pipeline stages, devices) may share a host thread: make ours current.
  void on_device() const { DS_CUDA_CHECK(cudaSetDevice(device_)); }
  const void* device_copy(const void* host, size_t bytes);
  void fill_forced_logits(const float* logits, size_t n_rows, size_t n_vocab, const DigestRequest* requests,
                          cuda::DigestRow* dev_rows);
  bool splits(const GgufTensor& t) const;
  void upload_split(const GgufTensor& t, uint8_t* dev);
  const void* bf16_weights(const WeightView& w);
  cuda::TcGemmOptions tc_options(const WeightView& w, size_t n);
  // Whether an n-token product with w runs on the small-batch GEMM over split rows (bf16 mode).
  bool takes_split_small(const WeightView& w, size_t n) const {
    return tc_.split_small && w.type == GgmlType::Q8_0_SPLIT && n <= cuda::detail::kSplitSmallMaxTokens;
  }

  int device_;
  cuda::MatmulPrecision precision_;  // how prefill products run (bf16 tensor cores unless f32 asked for)
  cuda::TcGemmOptions tc_;           // the products' options, built once (bf16_weights set per call)
  bool bf16_weight_copy_;            // keep persistent bf16 copies of the prefill weights
  bool device_digest_;               // digest logits on the device when a step asks for digests
  bool fused_ops_;                   // add_rms_norm, conv_silu_l2_token as one kernel each
  bool stacked_weights_;             // weight_stack uploads stacked matrices
  cuda::GdnMath gdn_math_;           // the chunked GDN's state pass: tensor cores only in bf16 prefill mode
  bool prefill_fusions_;             // swiglu_matmul and l2_norm_heads fused (else the default ops)
  bool q8_split_;                    // eligible Q8_0 matrices uploaded in the split-rows layout
  bool decode_pdl_;                  // decode GEMV and small decode ops as programmatic dependent launches
  DeviceScratch digest_scratch_, digest_rows_;
  DeviceScratch gate_scratch_;  // g / beta of the unfused raw-gate gdn_decode_slots
  DeviceScratch act_scratch_;   // the down projection's activations quantized once (tensor-core GEMV)
  PinnedScratch digest_host_;
  std::unordered_map<const void*, void*> bf16_weights_;  // device Q8_0 matrix -> its bf16 copy (or null)
  cudaStream_t stream_ = nullptr;
  std::unordered_set<float*> allocations_;
  std::unordered_map<const void*, void*> uploads_;        // mapped weight bytes -> device copy
  std::unordered_map<const void*, void*> small_tensors_;  // mapped small tensor -> device f32
  // One buffer per kind of control array, so repeated identical uploads (every layer of a step
  // writes K/V to the same pool rows) hit ControlBuffer's "same as last time" check.
  ControlBuffer ids_, positions_, rows_, kv_rows_, block_table_, slots_;
  cuda_buffers::PinnedUpload logit_edits_, forced_ids_, token_masks_;  // up to ~ (ids seen) x rows x 20 bytes per step
  ControlBuffer decode_batch_;   // batched decode attention: descriptors + block tables, same for every layer of a step
  ControlBuffer prefill_batch_;  // batched prefill attention: tiles, gathers, block tables; likewise
  std::vector<size_t> batch_rest_;  // a batch's sequences that run through attention_causal
  ControlBuffer prep_control_;  // attention_prep: positions then pool rows, same for every attention layer of a step
  std::vector<uint32_t> prep_host_;     // host staging of that upload
  std::vector<uint32_t> mask_staging_;  // mask_logits: rows then masks, one upload
};

CudaBackend::~CudaBackend() {
  // Destructors must not throw: errors here (a dead context) are reported and ignored.
  if (cudaSetDevice(device_) != cudaSuccess || cudaStreamSynchronize(stream_) != cudaSuccess) {
    std::fprintf(stderr, "cuda backend: device %d failed during teardown\n", device_);
  }
  for (float* p : allocations_) cudaFree(p);
  for (auto& [host, dev] : uploads_) cudaFree(dev);
  for (auto& [host, dev] : small_tensors_) cudaFree(dev);
  for (auto& [q8, dev] : bf16_weights_) cudaFree(dev);
  cuda::set_dependent_launches(stream_, false);  // a later stream may get this handle
  cudaStreamDestroy(stream_);
}

float* CudaBackend::alloc(size_t n) {
  on_device();
  const size_t bytes = (n == 0 ? 1 : n) * sizeof(float);
  void* p = nullptr;
  DS_CUDA_CHECK(cudaMalloc(&p, bytes));
  allocations_.insert(static_cast<float*>(p));
  DS_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  return static_cast<float*>(p);
}

void CudaBackend::release(float* p) {
  if (p == nullptr) return;
  on_device();
  DS_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued work may still read p
  allocations_.erase(p);
  DS_CUDA_CHECK(cudaFree(p));
}

const void* CudaBackend::device_copy(const void* host, size_t bytes) {
  auto it = uploads_.find(host);
  if (it != uploads_.end()) return it->second;
  on_device();
  void* dev = nullptr;
  DS_CUDA_CHECK(cudaMalloc(&dev, bytes == 0 ? 1 : bytes));
  uploads_.emplace(host, dev);
  DS_CUDA_CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
  return dev;
}

bool CudaBackend::splits(const GgufTensor& t) const {
  return q8_split_ && t.type == GgmlType::Q8_0 && q8_split_eligible(t.ne[0], t.row_bytes());
}

// Rows are reordered on the host in slices of about 64 MB (a 1 GB LM head needs no 1 GB buffer).
void CudaBackend::upload_split(const GgufTensor& t, uint8_t* dev) {
  const size_t row_bytes = t.row_bytes(), rows = t.n_rows();
  const size_t rows_per_slice = std::max<size_t>(1, (size_t{64} << 20) / row_bytes);
  std::vector<uint8_t> staging(std::min(rows, rows_per_slice) * row_bytes);
  for (size_t r0 = 0; r0 < rows; r0 += rows_per_slice) {
    const size_t n = std::min(rows_per_slice, rows - r0);
    q8_split_rows(static_cast<const uint8_t*>(t.data) + r0 * row_bytes, n, t.ne[0], staging.data());
    DS_CUDA_CHECK(cudaMemcpy(dev + r0 * row_bytes, staging.data(), n * row_bytes, cudaMemcpyHostToDevice));
  }
}

// Split uploads are keyed by the tensor's last byte, so a GGUF-order copy of the same bytes (keyed
// by the first) can never be handed out as split or the other way round.
WeightView CudaBackend::weight(const GgufTensor& t) {
  WeightView w;
  w.cols = t.ne[0];
  w.rows = t.n_rows();
  w.row_bytes = t.row_bytes();
  if (!splits(t)) {
    w.type = t.type;
    w.data = device_copy(t.data, t.nbytes);
    return w;
  }
  w.type = GgmlType::Q8_0_SPLIT;
  const void* key = static_cast<const uint8_t*>(t.data) + t.nbytes - 1;
  if (auto it = uploads_.find(key); it != uploads_.end()) {
    w.data = it->second;
    return w;
  }
  on_device();
  void* dev = nullptr;
  DS_CUDA_CHECK(cudaMalloc(&dev, t.nbytes));
  uploads_.emplace(key, dev);
  upload_split(t, static_cast<uint8_t*>(dev));
  w.data = dev;
  return w;
}

// The parts' bytes back to back in one allocation (rows of one type and width, so the stacked
// rows are just the parts' rows in order). Owned like the single uploads.
WeightView CudaBackend::weight_stack(const GgufTensor* const* parts, size_t n_parts) {
  if (!stacked_weights_ || n_parts == 0) return {};
  size_t bytes = 0, rows = 0;
  for (size_t i = 0; i < n_parts; ++i) {
    const GgufTensor& t = *parts[i];
    if (t.type != parts[0]->type || t.ne[0] != parts[0]->ne[0] || t.row_bytes() != parts[0]->row_bytes()) return {};
    bytes += t.nbytes;
    rows += t.n_rows();
  }
  on_device();
  void* dev = nullptr;
  DS_CUDA_CHECK(cudaMalloc(&dev, bytes == 0 ? 1 : bytes));
  uploads_.emplace(dev, dev);  // keyed by itself: freed with the other uploads
  // Every part has the same width and type, so either all are split or none.
  const bool split = splits(*parts[0]);
  size_t offset = 0;
  for (size_t i = 0; i < n_parts; ++i) {
    if (split) {
      upload_split(*parts[i], static_cast<uint8_t*>(dev) + offset);
    } else {
      DS_CUDA_CHECK(
          cudaMemcpy(static_cast<uint8_t*>(dev) + offset, parts[i]->data, parts[i]->nbytes, cudaMemcpyHostToDevice));
    }
    offset += parts[i]->nbytes;
  }
  WeightView w;
  w.type = split ? GgmlType::Q8_0_SPLIT : parts[0]->type;
  w.data = dev;
  w.cols = parts[0]->ne[0];
  w.rows = rows;
  w.row_bytes = parts[0]->row_bytes();
  return w;
}

// Small tensors are dequantized on the host (any GGUF type the CPU can read), then uploaded; the
// cache key is the mapped tensor, like the CPU backend's.
const float* CudaBackend::f32_tensor(const GgufTensor& t) {
  auto it = small_tensors_.find(t.data);
  if (it != small_tensors_.end()) return static_cast<const float*>(it->second);
  std::vector<float> v(t.n_elements());
  dequantize_row(t.type, t.data, v.data(), v.size());
  on_device();
  void* dev = nullptr;
  DS_CUDA_CHECK(cudaMalloc(&dev, v.empty() ? 1 : v.size() * sizeof(float)));
  small_tensors_.emplace(t.data, dev);
  DS_CUDA_CHECK(cudaMemcpy(dev, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return static_cast<const float*>(dev);
}

void CudaBackend::embed_rows(const WeightView& table, const int32_t* host_ids, size_t n, float* out) {
  for (size_t t = 0; t < n; ++t) {  // the device cannot throw: validate like kernels/cpu/embedding.cpp
    if (host_ids[t] < 0 || static_cast<size_t>(host_ids[t]) >= table.rows) {
      throw FormatError("token id " + std::to_string(host_ids[t]) + " outside the embedding table of " +
                        std::to_string(table.rows) + " rows");
    }
  }
  on_device();
  const auto* ids = static_cast<const int32_t*>(ids_.put(host_ids, n * sizeof(int32_t), stream_));
  DS_CUDA_CHECK(cuda::embed_rows(table, ids, n, out, stream_));
}

// The tensor-core GEMM's options for an n-token product with w (its persistent bf16 copy when on).
cuda::TcGemmOptions CudaBackend::tc_options(const WeightView& w, size_t n) {
  cuda::TcGemmOptions tc = tc_;
  // Not in the small-batch GEMM's range: it reads the Q8_0 rows (and stacks, whose first part shares
  // their data pointer, run only there, so a copy keyed by that pointer always has the part's shape).
  const bool small_gemm = takes_split_small(w, n);
  if (bf16_weight_copy_ && precision_ == cuda::MatmulPrecision::kBf16TensorCores &&
      (w.type == GgmlType::Q8_0 || w.type == GgmlType::Q8_0_SPLIT) && w.cols % 32 == 0 && n >= cuda::kTcMinTokens &&
      !small_gemm) {
    tc.bf16_weights = bf16_weights(w);
  }
  return tc;
}

void CudaBackend::matmul_rows(const WeightView& w, const float* x, size_t xs, size_t n, const RowOutput* outs,
                              size_t n_outs) {
  cuda::RowSegments seg;
  if (n_outs >= 1 && n_outs <= static_cast<size_t>(cuda::kMaxRowSegments)) {
    seg.n = static_cast<int>(n_outs);
    for (size_t i = 0; i < n_outs; ++i) {
      seg.first[i + 1] = seg.first[i] + outs[i].rows;
      seg.y[i] = outs[i].y;
      seg.ys[i] = outs[i].ys;
    }
    on_device();
    const cudaError_t e = cuda::matmul_rows(w, x, xs, n, seg, precision_, tc_options(w, n), stream_);
    if (e != cudaErrorNotSupported && e != cudaErrorInvalidValue) {
      DS_CUDA_CHECK(e);
      return;
    }
  }
  Backend::matmul_rows(w, x, xs, n, outs, n_outs);  // one product per output
}

void CudaBackend::matmul(const WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys) {
  on_device();
  const cuda::TcGemmOptions tc = tc_options(w, n);
  const cudaError_t e = cuda::matmul(w, x, xs, n, y, ys, precision_, tc, stream_);
  if (e == cudaErrorNotSupported) {  // same error as the CPU backend
    throw FormatError(std::string("matmul: unsupported weight type ") + ggml_type_name(w.type));
  }
  DS_CUDA_CHECK(e);
}

// The persistent bf16 copy of a Q8_0 matrix, made on its first prefill product. When it does not
// fit, nullptr is remembered and the matrix keeps the per-call dequantization (a warning once).
const void* CudaBackend::bf16_weights(const WeightView& w) {
  auto it = bf16_weights_.find(w.data);
  if (it != bf16_weights_.end()) return it->second;
  void* dev = nullptr;
  if (cudaMalloc(&dev, w.rows * w.cols * 2) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky allocation error
    std::fprintf(stderr, "cuda backend: no room for a bf16 copy of a %zux%zu matrix; dequantizing per call\n", w.rows,
                 w.cols);
    bf16_weights_.emplace(w.data, nullptr);
    return nullptr;
  }
  bf16_weights_.emplace(w.data, dev);
  DS_CUDA_CHECK(cuda::dequantize_q8_to_bf16(w, dev, stream_));
  return dev;
}

void CudaBackend::rope_neox(float* x, size_t n_tokens, size_t ts, size_t n_heads, size_t hs, size_t head_dim,
                            size_t n_rot, const int32_t* host_positions, std::array<int32_t, 4> sections, float theta) {
  on_device();
  const auto* pos =
      static_cast<const int32_t*>(positions_.put(host_positions, 3 * n_tokens * sizeof(int32_t), stream_));
  DS_CUDA_CHECK(cuda::rope_neox(x, n_tokens, ts, n_heads, hs, head_dim, n_rot, pos, sections, theta, stream_));
}

// Prefill pieces of kGdnChunkedMinTokens or more take the chunked (UT/WY) form, parallel over
// chunks; shorter multi-token pieces (MTP verification) the register-state recurrence, single
// tokens the decode form. All f32; the forms agree to f32 rounding (tests/kernels/cuda).
constexpr size_t kGdnChunkedMinTokens = 32;

void CudaBackend::gdn(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, float* state, float* out) {
  on_device();
  if (s.n_tokens >= kGdnChunkedMinTokens && cuda::gdn_chunked_applies(s)) {
    // Tensor-core mode: both halves on tensor cores; f32: the v3 prep (v2 where v3 does not apply).
    const bool tc = gdn_math_ == cuda::GdnMath::kTensorCores;
    const cuda::GdnChunkedConfig config{tc ? cuda::GdnPrep::kTensorCores : cuda::GdnPrep::kV3, gdn_math_, 0};
    DS_CUDA_CHECK(cuda::gdn_chunked_configured(config, s, q, k, v, g, beta, state, out, stream_));
  } else if (s.n_tokens >= 2) {
    DS_CUDA_CHECK(cuda::gdn_prefill(s, q, k, v, g, beta, state, out, stream_));
  } else {
    DS_CUDA_CHECK(cuda::gdn_recurrent(s, q, k, v, g, beta, state, out, stream_));
  }
}

void CudaBackend::gdn_captured(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                               const float* beta, float* state, float* out, size_t n_captures, float* captures,
                               size_t capture_stride) {
  on_device();
  const cudaError_t e =
      cuda::gdn_recurrent_captured(s, q, k, v, g, beta, state, out, n_captures, captures, capture_stride, stream_);
  if (e == cudaErrorNotSupported) {  // dk > 128: token by token
    return Backend::gdn_captured(s, q, k, v, g, beta, state, out, n_captures, captures, capture_stride);
  }
  DS_CUDA_CHECK(e);
}

// The verify row's gates inside the recurrence's launch (the decode step's fused form).
void CudaBackend::gdn_captured(const GdnShape& s, const float* q, const float* k, const float* v,
                               const GdnRawGates& gates, float* state, float* out, size_t n_captures, float* captures,
                               size_t capture_stride) {
  on_device();
  const cudaError_t e = fused_ops_ ? cuda::gdn_recurrent_captured(s, q, k, v, gates, state, out, n_captures, captures,
                                                                  capture_stride, stream_)
                                   : cudaErrorNotSupported;
  if (e == cudaErrorNotSupported) {  // unfused, or dk > 128: the gates kernel, then the form above
    return Backend::gdn_captured(s, q, k, v, gates, state, out, n_captures, captures, capture_stride);
  }
  DS_CUDA_CHECK(e);
}

// The edits are a host array of the step, checked here with the CPU's error (the kernel cannot throw).
void CudaBackend::edit_logits(float* logits, size_t n_rows, size_t n_vocab, const LogitEdit* edits, size_t n_edits) {
  if (n_edits == 0) return;
  for (size_t i = 0; i < n_edits; ++i) {
    if (edits[i].row >= n_rows || edits[i].id < 0 || static_cast<size_t>(edits[i].id) >= n_vocab) {
      throw std::invalid_argument("logit edit outside the logits block");
    }
  }
  on_device();
  // Pinned, grown by powers of two: the edits grow a little every decode step and reach 100s of
  // KiB with repetition penalties (16 streams at -25% served throughput with a pageable copy
  // grown step by step).
  const auto* dev = static_cast<const LogitEdit*>(logit_edits_.put(edits, n_edits * sizeof(LogitEdit), stream_));
  DS_CUDA_CHECK(cuda::apply_logit_edits(logits, n_rows, n_vocab, dev, n_edits, stream_));
}

// One pinned upload per step: the masked rows, which distinct mask each takes, then the distinct
// masks (~31 KiB each at a 248K vocabulary).
void CudaBackend::mask_logits(float* logits, size_t n_rows, size_t n_vocab, const TokenMasks& masks) {
  if (masks.empty()) return;
  check_token_masks(masks, n_rows, n_vocab);
  on_device();
  const size_t n = masks.rows.size();
  mask_staging_.resize(2 * n + masks.bits.size());
  std::copy(masks.rows.begin(), masks.rows.end(), mask_staging_.begin());
  std::copy(masks.mask_of_row.begin(), masks.mask_of_row.end(), mask_staging_.begin() + static_cast<long>(n));
  std::copy(masks.bits.begin(), masks.bits.end(), mask_staging_.begin() + static_cast<long>(2 * n));
  const auto* dev =
      static_cast<const uint32_t*>(token_masks_.put(mask_staging_.data(), mask_staging_.size() * 4, stream_));
  DS_CUDA_CHECK(cuda::apply_token_masks(logits, n_vocab, dev, dev + n, n, dev + 2 * n, masks.n_words, stream_));
}

void CudaBackend::gather_rows(const float* src, const uint32_t* host_rows, size_t n_rows, size_t dim, float* dst) {
  on_device();
  const auto* rows = static_cast<const uint32_t*>(rows_.put(host_rows, n_rows * sizeof(uint32_t), stream_));
  DS_CUDA_CHECK(cuda::gather_rows(src, rows, n_rows, dim, dst, stream_));
}

// The block table is a host array of the step; the kernel reads it from device memory.
void CudaBackend::attention_causal(const AttentionShape& s, const float* q, const KvPages& kv, float scale,
                                   float* out) {
  on_device();
  const size_t n_blocks = kv.block_size == 0 ? 0 : (s.kv_len + kv.block_size - 1) / kv.block_size;
  KvPages dev = kv;
  dev.block_table = static_cast<const int32_t*>(block_table_.put(kv.block_table, n_blocks * sizeof(int32_t), stream_));
  // Prefill chunks take the tiled (flash-style) kernels: K/V rows read once per 64 queries, on
  // bf16 tensor cores in the bf16 prefill mode, in f32 otherwise.
  if (s.n_q_tokens >= cuda::kAttentionPrefillMinTokens) {
    if (precision_ == cuda::MatmulPrecision::kBf16TensorCores && cuda::attention_prefill_tc_applies(s, q, dev, out)) {
      DS_CUDA_CHECK(cuda::attention_prefill_tc(s, q, dev, scale, out, stream_));
      return;
    }
    if (cuda::attention_prefill_applies(s, q, dev, out)) {
      DS_CUDA_CHECK(cuda::attention_prefill(s, q, dev, scale, out, stream_));
      return;
    }
  }
  DS_CUDA_CHECK(cuda::attention_causal(s, q, dev, scale, out, stream_));
}

// A step's attention over many sequences (kernels/cuda/attention_prefill.h attention_batch: prefill
// chunks in one tiled launch, one-token rows in one decode launch pair); each upload is the same
// for every attention layer of the step, so only the first layer copies.
void CudaBackend::attention_batch(const AttentionBatch& b) {
  if (b.n_seqs < 2) return Backend::attention_batch(b);
  on_device();
  const cuda::DeviceUpload prefill = [this](const void* h, size_t n) { return prefill_batch_.put(h, n, stream_); };
  const cuda::DeviceUpload decode = [this](const void* h, size_t n) { return decode_batch_.put(h, n, stream_); };
  const bool tc = precision_ == cuda::MatmulPrecision::kBf16TensorCores;
  DS_CUDA_CHECK(cuda::attention_batch(b, tc, fused_ops_, prefill, decode, &batch_rest_, stream_));
  for (const size_t i : batch_rest_) {
    attention_causal(cpu::batch_seq_shape(b, i), b.q + b.seqs[i].q_offset, cpu::batch_seq_pages(b, i), b.scale,
                     b.out + b.seqs[i].out_offset);
  }
}

// An attention layer's q/k prep and K/V write in one launch (kernels/cuda/attention_prep.h; its
// positions and pool rows are one upload per step); else (fused ops off, heads off its range) the separate ops.
void CudaBackend::attention_prep(const AttentionPrep& p) {
  if (const char* why = cpu::attention_prep_problem(p)) {
    throw std::invalid_argument(std::string("attention_prep: ") + why);
  }
  if (!fused_ops_ || !cuda::attention_prep_applies(p)) return Backend::attention_prep(p);
  if (p.n_tokens == 0) return;
  on_device();
  const size_t T = p.n_tokens;
  prep_host_.resize(4 * T);
  std::memcpy(prep_host_.data(), p.positions, 3 * T * sizeof(int32_t));
  std::memcpy(prep_host_.data() + 3 * T, p.kv_rows, T * sizeof(uint32_t));
  const auto* dev =
      static_cast<const uint32_t*>(prep_control_.put(prep_host_.data(), 4 * T * sizeof(uint32_t), stream_));
  AttentionPrep on_dev = p;
  on_dev.positions = reinterpret_cast<const int32_t*>(dev);
  on_dev.kv_rows = dev + 3 * T;
  DS_CUDA_CHECK(cuda::attention_prep(on_dev, stream_));
}

// One sync per step: the digests come back in one small copy; a row the device flags (NaN,
// +inf, nothing finite) is downloaded whole and digested by the CPU code, whose order it follows.
bool CudaBackend::digest_logits_rows(const float* logits, size_t n_rows, size_t n_vocab, const DigestRequest* requests,
                                     LogitDigest* out) {
  if (!device_digest_ || n_rows > 65535 || n_vocab == 0 || n_vocab > cuda::kDigestMaxVocab) return false;
  uint32_t k = 1;
  for (size_t r = 0; r < n_rows; ++r) {
    if (!cuda::digest_on_device_applies(requests[r].rule)) return false;
    k = std::max(k, cuda::digest_candidates(requests[r].rule));
  }
  if (n_rows == 0) return true;
  on_device();
  void* scratch = digest_scratch_.get(cuda::logit_digest_scratch_bytes(n_rows, n_vocab, k), stream_);
  const size_t row_bytes = n_rows * sizeof(cuda::DigestRow);
  auto* dev_rows = static_cast<cuda::DigestRow*>(digest_rows_.get(row_bytes, stream_));
  auto* host_rows = static_cast<cuda::DigestRow*>(digest_host_.get(row_bytes));
  DS_CUDA_CHECK(cuda::logit_digest_rows(logits, n_rows, n_vocab, k, scratch, dev_rows, stream_));
  fill_forced_logits(logits, n_rows, n_vocab, requests, dev_rows);
  DS_CUDA_CHECK(cudaMemcpyAsync(host_rows, dev_rows, row_bytes, cudaMemcpyDeviceToHost, stream_));
  DS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<float> full;
  for (size_t r = 0; r < n_rows; ++r) {
    const DigestRequest& q = requests[r];
    if (host_rows[r].irregular == 0) {
      out[r] = cuda::finish_digest(host_rows[r], n_vocab, q.rule, q.u);
      if (q.forced >= 0) force_token(&out[r], q.forced, host_rows[r].forced_logit);
      continue;
    }
    full.resize(n_vocab);
    download(full.data(), logits + r * n_vocab, n_vocab);
    out[r] = ds::digest_request(full.data(), n_vocab, q);
  }
  return true;
}

// Prompt-logprob rows: the forced ids' logits into their digest rows (nothing when none is forced).
void CudaBackend::fill_forced_logits(const float* logits, size_t n_rows, size_t n_vocab, const DigestRequest* requests,
                                     cuda::DigestRow* dev_rows) {
  // Every decode step passes here: nothing is built unless a row is forced.
  const auto is_forced = [](const DigestRequest& q) { return q.forced >= 0; };
  if (std::none_of(requests, requests + n_rows, is_forced)) return;
  std::vector<int32_t> forced(n_rows, -1);
  for (size_t r = 0; r < n_rows; ++r) {
    if (!is_forced(requests[r])) continue;
    if (static_cast<size_t>(requests[r].forced) >= n_vocab) {
      throw std::invalid_argument("forced token outside the vocabulary");
    }
    forced[r] = requests[r].forced;
  }
  const auto* dev = static_cast<const int32_t*>(forced_ids_.put(forced.data(), n_rows * sizeof(int32_t), stream_));
  DS_CUDA_CHECK(cuda::fill_forced_logits(logits, n_rows, n_vocab, dev, dev_rows, stream_));
}

void CudaBackend::kv_write(KvType t, const float* src, const uint32_t* host_rows, size_t n_rows, size_t n, void* pool) {
  on_device();
  const auto* rows = static_cast<const uint32_t*>(kv_rows_.put(host_rows, n_rows * sizeof(uint32_t), stream_));
  DS_CUDA_CHECK(cuda::kv_write_rows(t, src, n, rows, n_rows, n, pool, stream_));
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, CudaBackendOptions options, CudaAblations ablations) {
  return std::make_unique<CudaBackend>(device, options, ablations);
}

}  // namespace ds
