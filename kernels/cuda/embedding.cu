#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda {
namespace {

constexpr int kThreads = 256;

// Every kernel here may run as a dependent launch (common.cuh launch_dependent_if_enabled): it
// waits for the previous kernel before reading ids / rows / activations or writing anything.

// One block per id, threads over the columns of the row.
template <GgmlType T>
__global__ void embed_kernel(const uint8_t* table, size_t rows, size_t cols, size_t row_bytes, const int32_t* ids,
                             size_t n_ids, float* out) {
  detail::wait_for_previous_kernel();
  for (size_t t = blockIdx.x; t < n_ids; t += gridDim.x) {
    const int32_t id = ids[t];
    float* o = out + t * cols;
    const bool valid = id >= 0 && static_cast<size_t>(id) < rows;
    const uint8_t* row = table + static_cast<size_t>(valid ? id : 0) * row_bytes;
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) {
      o[c] = valid ? detail::WeightRow<T>::one(row, c, cols) : NAN;
    }
  }
}

__global__ void gather_kernel(const float* src, const uint32_t* rows, size_t n_rows, size_t dim, float* dst) {
  detail::wait_for_previous_kernel();
  for (size_t i = blockIdx.x; i < n_rows; i += gridDim.x) {
    const float* s = src + size_t{rows[i]} * dim;
    for (size_t c = threadIdx.x; c < dim; c += blockDim.x) dst[i * dim + c] = s[c];
  }
}

__global__ void scatter_kernel(const float* src, const uint32_t* rows, size_t n_rows, size_t dim, float* dst) {
  detail::wait_for_previous_kernel();
  for (size_t i = blockIdx.x; i < n_rows; i += gridDim.x) {
    float* d = dst + size_t{rows[i]} * dim;
    for (size_t c = threadIdx.x; c < dim; c += blockDim.x) d[c] = src[i * dim + c];
  }
}

unsigned row_grid(size_t n) {
  return static_cast<unsigned>(n < 65535u * 16u ? n : 65535u * 16u);
}

template <GgmlType T>
cudaError_t launch_embed(const uint8_t* data, const cpu::WeightView& table, const int32_t* ids, size_t n_ids,
                         float* out, cudaStream_t stream) {
  return detail::launch_dependent_if_enabled(embed_kernel<T>, dim3(row_grid(n_ids)), dim3(kThreads), 0, stream, data,
                                             table.rows, table.cols, table.row_bytes, ids, n_ids, out);
}

}  // namespace

cudaError_t embed_rows(const cpu::WeightView& table, const int32_t* ids, size_t n_ids, float* out,
                       cudaStream_t stream) {
  if (!detail::weight_type_supported(table.type)) return cudaErrorNotSupported;
  if (n_ids == 0 || table.cols == 0) return cudaSuccess;
  if (table.data == nullptr || ids == nullptr || out == nullptr) return cudaErrorInvalidValue;
  if (!detail::aligned_to(ids, 4) || !detail::aligned_to(out, 4) ||
      !detail::aligned_to(table.data, detail::weight_alignment(table.type)) ||
      table.row_bytes % detail::weight_alignment(table.type) != 0) {
    return cudaErrorMisalignedAddress;
  }
  if (detail::is_q8_0(table.type) && table.cols % detail::kQ8Block != 0) return cudaErrorInvalidValue;
  if (table.row_bytes < ggml_row_bytes(table.type, table.cols)) return cudaErrorInvalidValue;
  const auto* data = static_cast<const uint8_t*>(table.data);
  switch (table.type) {
    case GgmlType::F32:
      return launch_embed<GgmlType::F32>(data, table, ids, n_ids, out, stream);
    case GgmlType::F16:
      return launch_embed<GgmlType::F16>(data, table, ids, n_ids, out, stream);
    case GgmlType::BF16:
      return launch_embed<GgmlType::BF16>(data, table, ids, n_ids, out, stream);
    case GgmlType::Q8_0:
      return launch_embed<GgmlType::Q8_0>(data, table, ids, n_ids, out, stream);
    case GgmlType::Q8_0_SPLIT:  // the tied LM head may be stored split
      return launch_embed<GgmlType::Q8_0_SPLIT>(data, table, ids, n_ids, out, stream);
    default:
      return cudaErrorNotSupported;
  }
}

cudaError_t gather_rows(const float* src, const uint32_t* rows, size_t n_rows, size_t dim, float* dst,
                        cudaStream_t stream) {
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (src == nullptr || rows == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  if (!detail::aligned_to(src, 4) || !detail::aligned_to(rows, 4) || !detail::aligned_to(dst, 4)) {
    return cudaErrorMisalignedAddress;
  }
  return detail::launch_dependent_if_enabled(gather_kernel, dim3(row_grid(n_rows)), dim3(kThreads), 0, stream, src,
                                             rows, n_rows, dim, dst);
}

cudaError_t scatter_rows(const float* src, const uint32_t* rows, size_t n_rows, size_t dim, float* dst,
                         cudaStream_t stream) {
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  if (src == nullptr || rows == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  if (!detail::aligned_to(src, 4) || !detail::aligned_to(rows, 4) || !detail::aligned_to(dst, 4)) {
    return cudaErrorMisalignedAddress;
  }
  return detail::launch_dependent_if_enabled(scatter_kernel, dim3(row_grid(n_rows)), dim3(kThreads), 0, stream, src,
                                             rows, n_rows, dim, dst);
}

}  // namespace ds::cuda
