#include "common/q8_split.h"

#include <cstring>
#include <string>

#include "common/error.h"
#include "common/ggml_types.h"

namespace ds {
namespace {

constexpr size_t kBlock = 32, kBlockBytes = sizeof(BlockQ8_0);

void require_eligible(size_t cols) {
  if (!q8_split_eligible(cols, cols / kBlock * kBlockBytes)) {
    throw FormatError("Q8_0 split layout needs a multiple of " + std::to_string(kQ8SplitColAlign) + " columns, got " +
                      std::to_string(cols));
  }
}

}  // namespace

bool q8_split_eligible(size_t cols, size_t row_bytes) {
  return cols > 0 && cols % kQ8SplitColAlign == 0 && row_bytes == cols / kBlock * kBlockBytes;
}

void q8_split_rows(const uint8_t* src, size_t rows, size_t cols, uint8_t* dst) {
  require_eligible(cols);
  const size_t row_bytes = cols / kBlock * kBlockBytes, blocks = cols / kBlock;
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* in = src + r * row_bytes;
    uint8_t* q = dst + r * row_bytes;
    uint8_t* d = q + cols;
    for (size_t b = 0; b < blocks; ++b) {
      std::memcpy(d + 2 * b, in + b * kBlockBytes, 2);
      std::memcpy(q + b * kBlock, in + b * kBlockBytes + 2, kBlock);
    }
  }
}

void q8_unsplit_rows(const uint8_t* src, size_t rows, size_t cols, uint8_t* dst) {
  require_eligible(cols);
  const size_t row_bytes = cols / kBlock * kBlockBytes, blocks = cols / kBlock;
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* q = src + r * row_bytes;
    const uint8_t* d = q + cols;
    uint8_t* out = dst + r * row_bytes;
    for (size_t b = 0; b < blocks; ++b) {
      std::memcpy(out + b * kBlockBytes, d + 2 * b, 2);
      std::memcpy(out + b * kBlockBytes + 2, q + b * kBlock, kBlock);
    }
  }
}

void dequantize_q8_split_rows(const uint8_t* src, size_t rows, size_t cols, float* dst) {
  require_eligible(cols);
  const size_t row_bytes = cols / kBlock * kBlockBytes;
  for (size_t r = 0; r < rows; ++r) {
    const auto* q = reinterpret_cast<const int8_t*>(src + r * row_bytes);
    const uint8_t* d = src + r * row_bytes + cols;
    for (size_t c = 0; c < cols; ++c) {
      uint16_t h;
      std::memcpy(&h, d + 2 * (c / kBlock), 2);
      dst[r * cols + c] = fp16_to_fp32(h) * static_cast<float>(q[c]);
    }
  }
}

}  // namespace ds
