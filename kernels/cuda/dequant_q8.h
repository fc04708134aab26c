// Internal (gemm_tc.cu, tests, kernel lab): the v2 Q8_0 -> bf16 dequantization of the prefill
// GEMM's weight operand (dequant_q8.cu: warp-cooperative, coalesced; bit-identical to v1), and
// the dequantization of split rows (GgmlType::Q8_0_SPLIT, common/q8_split.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ds::cuda::detail {

// v2 needs packed rows (row_bytes = cols / 32 * 34) and 16-byte aligned weights and output.
bool dequant_v2_applies(const uint8_t* w, size_t row_bytes, size_t cols, const void* out);

// Dequantizes the matrix's Q8_0 blocks in whole groups of 32 (the matrix read as one packed
// stream of rows * cols / 32 blocks) and returns how many blocks that covered; the caller
// converts the remaining (< 32) blocks with v1. Launch errors surface at cudaGetLastError.
size_t launch_dequant_v2(const uint8_t* w, size_t rows, size_t cols, __nv_bfloat16* out, cudaStream_t stream);

// Dequantizes `rows` split rows to bf16 [rows][cols]: the same d * q rounded to nearest even as v1
// and v2, so the output equals their output for the matrix in GGUF order bit for bit. The caller
// checks: 16-byte aligned weights, rows (row_bytes % 16 == 0) and output, cols % 32 == 0 and
// row_bytes >= cols / 32 * 34 (the packed Q8_0 row size).
void launch_dequant_split(const uint8_t* w, size_t row_bytes, size_t rows, size_t cols, __nv_bfloat16* out,
                          cudaStream_t stream);

}  // namespace ds::cuda::detail
