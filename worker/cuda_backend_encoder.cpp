#include "worker/cuda_backend_encoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention_segments.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"

namespace ds {

void CudaEncoderOps::encoder_on_device() const {
  DS_CUDA_CHECK(cudaSetDevice(encoder_device_));
}

void CudaEncoderOps::layer_norm(const float* x, size_t xs, const float* w, const float* b, float eps, size_t rows,
                                size_t dim, float* y, size_t ys) {
  encoder_on_device();
  DS_CUDA_CHECK(cuda::layer_norm(x, xs, w, b, eps, rows, dim, y, ys, encoder_stream_));
}

void CudaEncoderOps::gelu(GeluKind kind, const float* x, size_t n, float* y) {
  encoder_on_device();
  DS_CUDA_CHECK(cuda::gelu(kind, x, n, y, encoder_stream_));
}

void CudaEncoderOps::add_bias(float* y, size_t ys, size_t rows, size_t dim, const float* bias) {
  encoder_on_device();
  DS_CUDA_CHECK(cuda::add_bias(y, ys, rows, dim, bias, encoder_stream_));
}

void CudaEncoderOps::rope_2d(float* x, size_t n_tokens, size_t ts, size_t n_heads, size_t hs, size_t head_dim,
                             const int32_t* host_positions, float theta) {
  if (head_dim % 4 != 0) throw std::invalid_argument("rope_2d: head_dim must be a multiple of 4");  // as the CPU
  if (n_tokens == 0 || n_heads == 0 || head_dim == 0) return;
  encoder_on_device();
  const auto* pos =
      static_cast<const int32_t*>(positions_.put(host_positions, 2 * n_tokens * sizeof(int32_t), encoder_stream_));
  DS_CUDA_CHECK(cuda::rope_2d(x, n_tokens, ts, n_heads, hs, head_dim, pos, theta, encoder_stream_));
}

void CudaEncoderOps::attention_segments(const SegmentAttention& a) {
  if (const char* why = cpu::segment_attention_problem(a)) {
    throw std::invalid_argument(std::string("attention_segments: ") + why);
  }
  if (a.n_tokens == 0 || a.n_heads == 0) return;
  size_t longest = 0;  // sizes the grid: the kernel reads the bounds from the device copy
  for (size_t s = 0; s < a.n_segments; ++s) longest = std::max<size_t>(longest, a.starts[s + 1] - a.starts[s]);
  encoder_on_device();
  SegmentAttention dev = a;
  dev.starts =
      static_cast<const uint32_t*>(starts_.put(a.starts, (a.n_segments + 1) * sizeof(uint32_t), encoder_stream_));
  DS_CUDA_CHECK(cuda::attention_segments(dev, longest, encoder_stream_));
}

}  // namespace ds
