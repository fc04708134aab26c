// L2 normalisation of every q and k head of a prefill step in one launch. The model's GDN layer
// normalises 2 * n_k_heads heads per token, each `dim` floats, contiguous inside each token's conv
// row; with l2_norm (norm.h) that is one launch per head (32 on 9B) because the rows of different
// heads are not one stride apart. Here warp w takes row (token w / n_heads, head w % n_heads),
// with l2_norm's per-row arithmetic (same lane partials, same shuffle tree), so the result equals
// the per-head launches bit for bit (tests/kernels/cuda/test_cuda_l2_norm_heads.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace ds::cuda {

// Head dims this kernel takes (l2_norm's warp-per-row range); wider rows: use l2_norm.
inline constexpr size_t kL2HeadsMaxDim = 1023;

// In place: for t < n_tokens, h < n_heads the row x + t * token_stride + h * dim is divided by
// sqrt(sum of squares + eps). cudaErrorNotSupported for dim > kL2HeadsMaxDim;
// cudaErrorInvalidValue when the heads do not fit in a token row (n_heads * dim > token_stride
// with n_tokens > 1) or x is null; cudaErrorMisalignedAddress when x is not 4-byte aligned.
cudaError_t l2_norm_heads(float* x, size_t token_stride, size_t n_tokens, size_t n_heads, size_t dim, float eps,
                          cudaStream_t stream);

}  // namespace ds::cuda
