// CUDA twin of kernels/cpu/embedding.h, plus the row gather the last stage uses before the LM head
// and the row scatter of KV cache writes.
// `table.data`, `ids`, `rows` and the f32 arrays are DEVICE pointers. The device cannot throw: an
// id outside [0, table.rows) fills its output row with NaN, so callers validate ids on the host
// (the CUDA backend does, with the CPU's error). Status codes as in kernels/cuda/norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"  // WeightView

namespace ds::cuda {

// out[t] = table row ids[t] dequantized to f32 (table.cols floats per row).
cudaError_t embed_rows(const cpu::WeightView& table, const int32_t* ids, size_t n_ids, float* out, cudaStream_t stream);

// dst[i] = src[rows[i]], rows of `dim` floats.
cudaError_t gather_rows(const float* src, const uint32_t* rows, size_t n_rows, size_t dim, float* dst,
                        cudaStream_t stream);

// dst[rows[i]] = src[i], rows of `dim` floats (the inverse of gather_rows; KV cache writes into
// pool rows). Target rows must be distinct.
cudaError_t scatter_rows(const float* src, const uint32_t* rows, size_t n_rows, size_t dim, float* dst,
                         cudaStream_t stream);

}  // namespace ds::cuda
