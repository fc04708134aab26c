// Embedding gather: rows of a (possibly quantized) table, dequantized to f32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace ds::cpu {

// out[t] = table row ids[t] (table.cols floats each). Throws ds::FormatError for an id outside
// [0, table.rows).
void embed_rows(const WeightView& table, const int32_t* ids, size_t n_ids, float* out);

}  // namespace ds::cpu
