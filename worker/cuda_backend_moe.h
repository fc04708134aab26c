// The CUDA backend's mixture-of-experts ops (Backend::moe_route, Backend::moe_experts) over
// kernels/cuda/moe.h, apart from worker/cuda_backend.cpp so that file stays within the size limit:
// CudaBackend derives from CudaMoeOps (which derives from CudaEncoderOps) and hands both their
// device and stream once the stream exists (bind_op_streams). Only built with DELTASERVE_HAVE_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/matmul.h"
#include "worker/cuda_backend_encoder.h"
#include "worker/cuda_buffers.h"

namespace ds {

class CudaMoeOps : public CudaEncoderOps {
 public:
  void moe_route(const float* logits, size_t n_tokens, size_t n_experts, size_t k, int32_t* experts,
                 float* weights) override;
  // Checked as the CPU does (std::invalid_argument), then the kernels of the step's regime
  // (kernels/cuda/moe.h) with the backend's grow-only scratch.
  void moe_experts(const MoeExperts& m) override;

 protected:
  // Called once by the derived backend's constructor, after it created `stream` on `device`:
  // binds the encoder ops too.
  // `precision`: the backend's prefill products (the grouped MoE products follow it).
  void bind_op_streams(int device, cudaStream_t stream, cuda::MatmulPrecision precision) {
    bind_encoder_stream(device, stream);
    moe_device_ = device;
    moe_stream_ = stream;
    moe_precision_ = precision;
  }

 private:
  // Several backends (pipeline stages, devices) may share a host thread: make ours current.
  void moe_on_device() const;

  int moe_device_ = 0;
  cudaStream_t moe_stream_ = nullptr;
  cuda::MatmulPrecision moe_precision_ = cuda::MatmulPrecision::kF32;
  cuda_buffers::DeviceScratch moe_scratch_;  // per-pair activations, rows and tiles of a step
};

}  // namespace ds
