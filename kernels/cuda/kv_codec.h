// CUDA twins of kernels/cpu/kv_codec.h: the KV write of a step in any KvType and the Hadamard
// rotation of heads (q4r's attention output is rotated back with it). Same bytes and bits as the
// CPU reference (tests/kernels/cuda/test_cuda_kv_codec.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/kv_format.h"

namespace ds::cuda {

// src row i (src + i * src_stride, n values) encoded into pool row rows[i]; rows is a DEVICE
// array of distinct rows. cudaErrorInvalidValue for null pointers or n that type t cannot take
// (block types: n % 32 != 0).
cudaError_t kv_write_rows(KvType t, const float* src, size_t src_stride, const uint32_t* rows, size_t n_rows, size_t n,
                          void* pool, cudaStream_t stream);

// In place: each head of each row rotated as cpu::hadamard_heads (head_dim a power of two,
// 32..256, else cudaErrorNotSupported).
cudaError_t hadamard_heads(float* x, size_t n_rows, size_t row_stride, size_t n_heads, size_t head_stride,
                           size_t head_dim, cudaStream_t stream);

}  // namespace ds::cuda
