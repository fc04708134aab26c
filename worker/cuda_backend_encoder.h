// The CUDA backend's encoder ops (Backend's "encoder ops" section: the vision tower's LayerNorm,
// GELU, bias, 2D rope and per-image attention) over kernels/cuda, apart from
// worker/cuda_backend.cpp so that file stays within the size limit: CudaBackend derives from
// CudaEncoderOps and hands it its device and stream once the stream exists. Only built with
// DELTASERVE_HAVE_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "worker/backend.h"
#include "worker/cuda_buffers.h"

namespace ds {

class CudaEncoderOps : public Backend {
 public:
  void layer_norm(const float* x, size_t xs, const float* w, const float* b, float eps, size_t rows, size_t dim,
                  float* y, size_t ys) override;
  void gelu(GeluKind kind, const float* x, size_t n, float* y) override;
  void add_bias(float* y, size_t ys, size_t rows, size_t dim, const float* bias) override;
  // The positions [2][n_tokens] are a host array: uploaded, then the kernel.
  void rope_2d(float* x, size_t n_tokens, size_t ts, size_t n_heads, size_t hs, size_t head_dim,
               const int32_t* host_positions, float theta) override;
  // a.starts is a host array: checked as the CPU does (std::invalid_argument), uploaded, then one launch.
  void attention_segments(const SegmentAttention& a) override;

 protected:
  // Called once by the derived backend's constructor, after it created `stream` on `device`.
  void bind_encoder_stream(int device, cudaStream_t stream) {
    encoder_device_ = device;
    encoder_stream_ = stream;
  }

 private:
  // Several backends (pipeline stages, devices) may share a host thread: make ours current.
  void encoder_on_device() const;

  int encoder_device_ = 0;
  cudaStream_t encoder_stream_ = nullptr;
  cuda_buffers::ControlBuffer positions_, starts_;  // rope_2d's positions, attention_segments' bounds
};

}  // namespace ds
