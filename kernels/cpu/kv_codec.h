// Rows of the KV cache in any KvType (common/kv_format.h): encoding when rows are written,
// decoding when attention reads them, and the normalised Walsh-Hadamard rotation of q4r's heads.
// The reference of the CUDA twins (kernels/cuda/kv_codec.h): the same codecs, so both write the
// same bytes for the same floats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/kv_format.h"

namespace ds::cpu {

// One row of n values (n a multiple of 32 for the block types) encoded into dst
// (kv_row_bytes(t, n) bytes).
void kv_encode_row(KvType t, const float* x, size_t n, uint8_t* dst);

// Values [first, first + count) of an encoded row of n values.
void kv_decode_range(KvType t, const uint8_t* row, size_t n, size_t first, size_t count, float* out);

// The KV write of a step: src row i (src + i * src_stride, n values) encoded into pool row
// rows[i] (rows: HOST array of distinct pool rows; the pool holds kv_row_bytes(t, n)-byte rows).
void kv_write_rows(KvType t, const float* src, size_t src_stride, const uint32_t* rows, size_t n_rows, size_t n,
                   void* pool);

// In place, each head of each row: x <- H x / sqrt(head_dim), H the Sylvester Hadamard matrix
// (symmetric, so applying it twice is the identity up to rounding). Head h of row r starts at
// x + r * row_stride + h * head_stride; head_dim a power of two. The butterfly order is fixed
// (strides 1, 2, 4, ...), which the CUDA twin follows, so both give the same bits.
void hadamard_heads(float* x, size_t n_rows, size_t row_stride, size_t n_heads, size_t head_stride, size_t head_dim);

}  // namespace ds::cpu
