// cuBLASLt bf16 GEMM with f32 accumulation and f32 output (see gemm_cublas.h for the layout).
#include <cublasLt.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "kernels/cuda/gemm_cublas.h"

namespace ds::cuda::detail {
namespace {

cudaError_t to_cuda_error(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return cudaSuccess;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_INVALID_VALUE:
      return cudaErrorInvalidValue;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return cudaErrorNotSupported;
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return cudaErrorNotSupported;
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return cudaErrorLaunchFailure;
    default:
      return cudaErrorUnknown;
  }
}

// Largest power of two (<= 256) dividing the address: cuBLASLt's heuristic assumes 256-byte
// aligned operands unless told otherwise, and a column slice of y may be less aligned.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

struct PlanKey {
  int device;
  size_t M, N, K, ys;
  uint32_t align_a, align_b, align_y;
  bool operator<(const PlanKey& o) const {
    return std::tie(device, M, N, K, ys, align_a, align_b, align_y) <
           std::tie(o.device, o.M, o.N, o.K, o.ys, o.align_a, o.align_b, o.align_y);
  }
};

// Descriptors and the chosen algorithm for one shape. Never destroyed while cached (the cache is
// cleared only at its size cap, under the same lock the launches hold).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;  // false: the heuristic found nothing (callers fall back)

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

struct StreamKey {
  int device;
  cudaStream_t stream;
  bool operator<(const StreamKey& o) const {
    return device != o.device ? device < o.device : std::less<cudaStream_t>()(stream, o.stream);
  }
};

// Every distinct token count is a new shape: bound the cache (a serving process sees many).
constexpr size_t kMaxPlans = 4096;

class LtState {
 public:
  static LtState& get() {
    static LtState* state = new LtState();  // never destroyed: CUDA may be gone at exit
    return *state;
  }

  std::mutex mu;

  // The device's handle (created on first use). Requires mu.
  cudaError_t handle(int device, cublasLtHandle_t* out) {
    auto it = handles_.find(device);
    if (it == handles_.end()) {
      cublasLtHandle_t h = nullptr;
      if (const cublasStatus_t s = cublasLtCreate(&h); s != CUBLAS_STATUS_SUCCESS) return to_cuda_error(s);
      it = handles_.emplace(device, h).first;
    }
    *out = it->second;
    return cudaSuccess;
  }

  // The stream's fixed workspace (allocated once). Requires mu.
  cudaError_t workspace(int device, cudaStream_t stream, void** out) {
    void*& ws = workspaces_[StreamKey{device, stream}];
    if (ws == nullptr) {
      if (const cudaError_t e = cudaMalloc(&ws, kLtWorkspaceBytes); e != cudaSuccess) {
        ws = nullptr;
        return e;
      }
    }
    *out = ws;
    return cudaSuccess;
  }

  // The cached plan for key, built on first use. Requires mu.
  cudaError_t plan(cublasLtHandle_t h, const PlanKey& key, const Plan** out) {
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      if (plans_.size() >= kMaxPlans) plans_.clear();
      it = plans_.try_emplace(key).first;
      if (const cudaError_t e = build(h, key, &it->second); e != cudaSuccess) {
        plans_.erase(it);
        return e;
      }
    }
    *out = &it->second;
    return cudaSuccess;
  }

 private:
  static cudaError_t build(cublasLtHandle_t h, const PlanKey& k, Plan* p) {
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    const auto M = static_cast<uint64_t>(k.M), N = static_cast<uint64_t>(k.N), K = static_cast<uint64_t>(k.K);
    const auto ld_ab = static_cast<int64_t>(k.K), ld_y = static_cast<int64_t>(k.ys);
    cublasStatus_t s = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a));
    }
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b));
    }
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, K, M, ld_ab);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, K, N, ld_ab);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, M, N, ld_y);
    if (s != CUBLAS_STATUS_SUCCESS) return to_cuda_error(s);

    cublasLtMatmulPreference_t pref = nullptr;
    if ((s = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS) return to_cuda_error(s);
    const uint64_t ws_bytes = kLtWorkspaceBytes;
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                             sizeof(ws_bytes));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.align_y},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.align_y}};
    for (const auto& [attr, value] : aligns) {
      if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatmulAlgoGetHeuristic(h, p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    // No algorithm is not an error: the plan remembers it and callers take the fallback kernel.
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && found == 0)) return cudaSuccess;
    if (s != CUBLAS_STATUS_SUCCESS) return to_cuda_error(s);
    p->algo = result.algo;
    p->supported = true;
    return cudaSuccess;
  }

  std::map<int, cublasLtHandle_t> handles_;
  std::map<StreamKey, void*> workspaces_;
  std::map<PlanKey, Plan> plans_;
};

}  // namespace

cudaError_t gemm_lt_prepare(cudaStream_t stream) {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  LtState& st = LtState::get();
  const std::lock_guard<std::mutex> lock(st.mu);
  cublasLtHandle_t h = nullptr;
  void* ws = nullptr;
  if (const cudaError_t e = st.handle(device, &h); e != cudaSuccess) return e;
  return st.workspace(device, stream, &ws);
}

cudaError_t gemm_bf16_lt(const void* a_bf16, const void* b_bf16, size_t M, size_t N, size_t K, float* y, size_t ys,
                         cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  if (a_bf16 == nullptr || b_bf16 == nullptr || y == nullptr || K == 0 || ys < M) return cudaErrorInvalidValue;
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  LtState& st = LtState::get();
  // Held through the launch: the plan's descriptors must outlive cublasLtMatmul's enqueue.
  const std::lock_guard<std::mutex> lock(st.mu);
  cublasLtHandle_t h = nullptr;
  void* ws = nullptr;
  const Plan* plan = nullptr;
  const PlanKey key{device, M, N, K, ys, alignment_of(a_bf16), alignment_of(b_bf16), alignment_of(y)};
  if (const cudaError_t e = st.handle(device, &h); e != cudaSuccess) return e;
  if (const cudaError_t e = st.workspace(device, stream, &ws); e != cudaSuccess) return e;
  if (const cudaError_t e = st.plan(h, key, &plan); e != cudaSuccess) return e;
  if (!plan->supported) return cudaErrorNotSupported;
  const float alpha = 1.0f, beta = 0.0f;
  return to_cuda_error(cublasLtMatmul(h, plan->op, &alpha, a_bf16, plan->a, b_bf16, plan->b, &beta, y, plan->c, y,
                                      plan->c, &plan->algo, ws, kLtWorkspaceBytes, stream));
}

}  // namespace ds::cuda::detail
