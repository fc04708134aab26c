// The split-rows Q8_0 layout (common/q8_split.h): a pure permutation of each row's bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/error.h"
#include "common/ggml_types.h"
#include "common/q8_split.h"

namespace ds {
namespace {

std::vector<uint8_t> random_q8_rows(size_t rows, size_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> raw(rows * ggml_row_bytes(GgmlType::Q8_0, cols));
  for (auto& b : raw) b = static_cast<uint8_t>(rng());
  // Finite scales (random bits could be NaN/inf, which compare unequal to themselves).
  for (size_t b = 0; b < raw.size() / 34; ++b) {
    const uint16_t h = fp32_to_fp16(std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng));
    raw[34 * b] = static_cast<uint8_t>(h & 0xFF);
    raw[34 * b + 1] = static_cast<uint8_t>(h >> 8);
  }
  return raw;
}

TEST(Q8Split, SameValuesAsGgufOrderAndExactInverse) {
  const size_t rows = 5, cols = 1024;
  const std::vector<uint8_t> raw = random_q8_rows(rows, cols, 7);
  std::vector<uint8_t> split(raw.size()), back(raw.size());
  q8_split_rows(raw.data(), rows, cols, split.data());
  EXPECT_NE(split, raw);  // a real reordering
  // Quants of row 1, block 3, element 5 land at q[96 + 5]; the block's scale at d[3].
  const size_t rb = ggml_row_bytes(GgmlType::Q8_0, cols);
  EXPECT_EQ(split[rb + 3 * 32 + 5], raw[rb + 3 * 34 + 2 + 5]);
  EXPECT_EQ(split[rb + cols + 2 * 3], raw[rb + 3 * 34]);
  EXPECT_EQ(split[rb + cols + 2 * 3 + 1], raw[rb + 3 * 34 + 1]);

  std::vector<float> want(rows * cols), got(rows * cols);
  dequantize_row(GgmlType::Q8_0, raw.data(), want.data(), want.size());
  dequantize_q8_split_rows(split.data(), rows, cols, got.data());
  EXPECT_EQ(got, want);  // bit-identical weights

  q8_unsplit_rows(split.data(), rows, cols, back.data());
  EXPECT_EQ(back, raw);
}

TEST(Q8Split, EligibilityAndErrors) {
  EXPECT_TRUE(q8_split_eligible(4096, 4352));
  EXPECT_TRUE(q8_split_eligible(12288, 13056));
  EXPECT_FALSE(q8_split_eligible(256, 272));    // not a multiple of 512 columns
  EXPECT_FALSE(q8_split_eligible(4096, 4368));  // padded rows
  EXPECT_FALSE(q8_split_eligible(0, 0));
  std::vector<uint8_t> a(272), b(272);
  EXPECT_THROW(q8_split_rows(a.data(), 1, 256, b.data()), FormatError);
  // Not a GGUF type: the reader's table does not know it, the row size is Q8_0's.
  GgmlTypeTraits t;
  EXPECT_FALSE(ggml_type_traits(static_cast<uint32_t>(GgmlType::Q8_0_SPLIT), &t));
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0_SPLIT, 4096), 4352u);
  EXPECT_STREQ(ggml_type_name(GgmlType::Q8_0_SPLIT), "Q8_0_SPLIT");
}

}  // namespace
}  // namespace ds
