#include "worker/cuda_backend_moe.h"

#include <stdexcept>
#include <string>

#include "common/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/moe.h"

namespace ds {

void CudaMoeOps::moe_on_device() const {
  DS_CUDA_CHECK(cudaSetDevice(moe_device_));
}

void CudaMoeOps::moe_route(const float* logits, size_t n_tokens, size_t n_experts, size_t k, int32_t* experts,
                           float* weights) {
  if (k == 0 || k > n_experts || n_experts > cuda::kMoeMaxExperts || k > cuda::kMoeMaxK) {
    throw std::invalid_argument("moe_route: " + std::to_string(k) + " of " + std::to_string(n_experts) +
                                " experts is outside the CUDA router's range");
  }
  moe_on_device();
  DS_CUDA_CHECK(cuda::moe_route(logits, n_tokens, n_experts, k, experts, weights, moe_stream_));
}

void CudaMoeOps::moe_experts(const MoeExperts& m) {
  if (const char* why = cpu::moe_experts_problem(m)) throw std::invalid_argument(std::string("moe_experts: ") + why);
  if (m.n_tokens == 0) return;
  moe_on_device();
  void* scratch = moe_scratch_.get(cuda::moe_experts_scratch_bytes(m, moe_precision_), moe_stream_);
  const cudaError_t e = cuda::moe_experts(m, scratch, moe_stream_, moe_precision_);
  if (e == cudaErrorNotSupported) {  // the matmul's error for a type the kernels do not read
    throw FormatError(std::string("moe_experts: unsupported expert weight type ") + ggml_type_name(m.gate_exps.type) +
                      " / " + ggml_type_name(m.down_exps.type));
  }
  DS_CUDA_CHECK(e);
}

}  // namespace ds
