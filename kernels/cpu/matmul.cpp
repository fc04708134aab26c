#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/thread_pool.h"

namespace ds::cpu {
namespace {

// Throws FormatError unless w is a type we multiply with whole blocks per row.
void check_weight(const WeightView& w) {
  switch (w.type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      return;
    case GgmlType::Q8_0:
      if (w.cols % 32 != 0) {
        throw FormatError("matmul: Q8_0 row of " + std::to_string(w.cols) + " elements is not a multiple of 32");
      }
      return;
    default:
      throw FormatError(std::string("matmul: unsupported weight type ") + ggml_type_name(w.type));
  }
}

// IEEE half -> float. Normal and subnormal halves: move the 15 magnitude bits into a float's
// exponent/mantissa field and rescale by 2^112 (exact: a power of two). Inf/NaN go the slow way.
inline float half_to_float(uint16_t h) {
  if ((h & 0x7C00u) == 0x7C00u) return fp16_to_fp32(h);
  const uint32_t mag_bits = static_cast<uint32_t>(h & 0x7FFFu) << 13;
  float mag;
  std::memcpy(&mag, &mag_bits, 4);
  mag *= 0x1p112f;
  return (h & 0x8000u) ? -mag : mag;
}

void dequant_q8_0_row(const uint8_t* src, float* dst, size_t cols) {
  for (size_t b = 0; b < cols / 32; ++b) {
    BlockQ8_0 blk;
    std::memcpy(&blk, src + b * sizeof(BlockQ8_0), sizeof(blk));
    const float d = half_to_float(blk.d);
    float* out = dst + b * 32;
    for (int i = 0; i < 32; ++i) out[i] = d * static_cast<float>(blk.qs[i]);
  }
}

void dequant_f16_row(const uint8_t* src, float* dst, size_t cols) {
  for (size_t i = 0; i < cols; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = half_to_float(h);
  }
}

void dequant_bf16_row(const uint8_t* src, float* dst, size_t cols) {
  for (size_t i = 0; i < cols; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = bf16_to_fp32(h);
  }
}

// Row r of w as cols floats; the type has been checked.
void dequant_row(const WeightView& w, size_t r, float* out) {
  const auto* src = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
  switch (w.type) {
    case GgmlType::F32:
      std::memcpy(out, src, w.cols * sizeof(float));
      return;
    case GgmlType::F16:
      dequant_f16_row(src, out, w.cols);
      return;
    case GgmlType::BF16:
      dequant_bf16_row(src, out, w.cols);
      return;
    case GgmlType::Q8_0:
      dequant_q8_0_row(src, out, w.cols);
      return;
    default:
      check_weight(w);  // throws
  }
}

// y[t][r0 + r] for r < n_rows from the dequantized rows wt ([n_rows][cols]).
void tile_times_tokens(const float* wt, size_t n_rows, size_t cols, const float* x, size_t x_stride, size_t t_begin,
                       size_t t_end, float* y, size_t y_stride, size_t r0) {
  for (size_t t = t_begin; t < t_end; ++t) {
    const float* xt = x + t * x_stride;
    float* yt = y + t * y_stride + r0;
    size_t r = 0;
    for (; r + 4 <= n_rows; r += 4) detail::dot4(wt + r * cols, cols, xt, cols, yt + r);
    for (; r < n_rows; ++r) yt[r] = detail::dot(wt + r * cols, xt, cols);
  }
}

constexpr size_t kTileBytes = 64 * 1024;  // dequantized weight tile, sized for L2
constexpr size_t kTokenBlock = 128;       // tokens per work item (amortizes the dequantization)

}  // namespace

void weight_row(const WeightView& w, size_t r, float* out) {
  check_weight(w);
  dequant_row(w, r, out);
}

void matmul(const WeightView& w, const float* x, size_t x_stride, size_t n_tokens, float* y, size_t y_stride,
            ThreadPool* pool) {
  check_weight(w);
  if (w.rows == 0 || n_tokens == 0) return;
  if (pool == nullptr) pool = default_pool();
  const size_t n_threads = static_cast<size_t>(pool->size());
  const size_t cols = std::max<size_t>(w.cols, 1);

  // Work item = (tile of weight rows, block of tokens), tile-major so one thread's consecutive
  // items reuse its dequantized tile. Tiles: multiple of 4 rows, <= kTileBytes, and small enough
  // to give every thread several items.
  size_t tile_rows = std::max<size_t>(4, kTileBytes / (cols * sizeof(float)));
  const size_t n_token_blocks = (n_tokens + kTokenBlock - 1) / kTokenBlock;
  const size_t want_tiles = (4 * n_threads + n_token_blocks - 1) / n_token_blocks;
  tile_rows = std::min(tile_rows, std::max<size_t>(4, (w.rows + want_tiles - 1) / want_tiles));
  tile_rows = (tile_rows + 3) / 4 * 4;
  const size_t n_tiles = (w.rows + tile_rows - 1) / tile_rows;

  pool->parallel_for(n_tiles * n_token_blocks, 1, [&](size_t begin, size_t end) {
    std::vector<float> tile(tile_rows * w.cols);
    size_t loaded = static_cast<size_t>(-1);
    for (size_t item = begin; item < end; ++item) {
      const size_t ti = item / n_token_blocks, tb = item % n_token_blocks;
      const size_t r0 = ti * tile_rows;
      const size_t n_rows = std::min(tile_rows, w.rows - r0);
      if (ti != loaded) {
        for (size_t r = 0; r < n_rows; ++r) dequant_row(w, r0 + r, tile.data() + r * w.cols);
        loaded = ti;
      }
      const size_t t0 = tb * kTokenBlock;
      const size_t t1 = std::min(n_tokens, t0 + kTokenBlock);
      tile_times_tokens(tile.data(), n_rows, w.cols, x, x_stride, t0, t1, y, y_stride, r0);
    }
  });
}

}  // namespace ds::cpu
