// ggml tensor element types: block geometry and dequantization to f32.
// Block layouts follow qwen35-model-spec.md §12.2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ds {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  // Not a GGUF type (never accepted from a file; ggml_type_traits does not know it): the CUDA
  // backend's device layout of a Q8_0 matrix with each row's quants first and its fp16 scales
  // after them (common/q8_split.h). Same bytes per row as Q8_0.
  Q8_0_SPLIT = 0x10008,
};

struct GgmlTypeTraits {
  const char* name;
  uint32_t block_elems;  // elements per block (1 for plain types)
  uint32_t block_bytes;  // bytes per block
  bool can_dequantize;   // dequantize_row supports it
};

// Traits of a known type id; returns false for ids we do not know.
bool ggml_type_traits(uint32_t type_id, GgmlTypeTraits* out);
const char* ggml_type_name(GgmlType type);

// Bytes of one row of `ne0` elements; ne0 must be a multiple of the block size.
size_t ggml_row_bytes(GgmlType type, uint64_t ne0);

// Dequantize `n` elements (a multiple of the block size) starting at `src` into `dst`.
// Throws ds::FormatError for a type without a dequantizer.
void dequantize_row(GgmlType type, const void* src, float* dst, size_t n);

// Scalar conversions used by dequantization and the kernels.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
inline float bf16_to_fp32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t fp32_to_bf16(float f);  // round to nearest even

// Q8_0 block: 32 int8 values sharing one fp16 scale.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");

}  // namespace ds
