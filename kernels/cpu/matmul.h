// y = W x for a batch of tokens, with W in its GGUF type (Q8_0 / F16 / BF16 / F32) and f32
// accumulation. W has `rows` output rows of `cols` inputs each (ggml [cols, rows]), row r at
// data + r*row_bytes. Multi-threaded over output rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/ggml_types.h"

namespace ds::cpu {

class ThreadPool;

struct WeightView {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;
  size_t rows = 0;       // output features
  size_t cols = 0;       // input features
  size_t row_bytes = 0;  // bytes of one row in `type`
};

// Rows [first, first + n) of a matrix, as a matrix of its own (rows are contiguous in every type).
inline WeightView row_range(const WeightView& m, size_t first, size_t n) {
  WeightView r = m;
  r.data = static_cast<const uint8_t*>(m.data) + first * m.row_bytes;
  r.rows = n;
  return r;
}

// x: [n_tokens, cols] (row stride x_stride), y: [n_tokens, rows] (row stride y_stride).
// Throws ds::FormatError for an unsupported weight type.
void matmul(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, float* y, size_t y_stride,
            ThreadPool* pool);

// Dequantizes row `r` of w into `out` (cols floats).
void weight_row(const WeightView& w, size_t r, float* out);

}  // namespace ds::cpu
