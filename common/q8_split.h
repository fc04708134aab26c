// The "split rows" device layout of Q8_0 matrices (GgmlType::Q8_0_SPLIT), used by the CUDA backend.
//
// GGUF stores a Q8_0 row as cols/32 blocks of {fp16 d, int8 q[32]}: 34-byte blocks, so the quants
// of most blocks are only 2-byte aligned and a GPU cannot read them with coalesced 16-byte loads
// without staging them through shared memory first. The split layout keeps the same row size and
// the same bytes, reordered within each row:
//
//   row r: q[0 .. cols) (int8, column order) | d[0 .. cols/32) (fp16 bits, block order)
//
// so a row's quants start at r * row_bytes (16-byte aligned whenever the matrix base is and
// row_bytes % 16 == 0) and its scales at r * row_bytes + cols. Weight values are unchanged: every
// kernel sees exactly d * q as before (bit-identical products).
//
// A matrix qualifies when cols % kQ8SplitColAlign == 0 (its rows are then 16-byte multiples and
// the decode GEMV's 512-column lane slices tile the row exactly) and row_bytes is the packed Q8_0
// row size; others stay in GGUF order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds {

inline constexpr size_t kQ8SplitColAlign = 512;

// True when a Q8_0 matrix with these dimensions may be stored split.
bool q8_split_eligible(size_t cols, size_t row_bytes);

// Reorders `rows` packed Q8_0 rows of `cols` columns from GGUF order (src) into the split layout
// (dst); src and dst must not overlap. Throws ds::FormatError when the shape does not qualify.
void q8_split_rows(const uint8_t* src, size_t rows, size_t cols, uint8_t* dst);

// The inverse (tests, debugging): split layout -> GGUF order.
void q8_unsplit_rows(const uint8_t* src, size_t rows, size_t cols, uint8_t* dst);

// Dequantizes row-major split rows like dequantize_row(Q8_0): dst[r * cols + c] = d * q.
void dequantize_q8_split_rows(const uint8_t* src, size_t rows, size_t cols, float* dst);

}  // namespace ds
