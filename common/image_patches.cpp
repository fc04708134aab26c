#include "common/image_patches.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace ds {

namespace {

// Python's round(): to the nearest integer, ties to the even one.
double round_half_even(double x) {
  const double lower = std::floor(x);
  const double frac = x - lower;
  if (frac > 0.5) return lower + 1.0;
  if (frac < 0.5) return lower;
  return std::fmod(lower, 2.0) == 0.0 ? lower : lower + 1.0;
}

uint32_t to_side(double v, const char* what) {
  if (!(v >= 0.0) || v > 4294967295.0) throw std::invalid_argument(std::string("smart_resize: ") + what);
  return static_cast<uint32_t>(v);
}

void check_rgb(const RgbImage& image, const char* who) {
  if (image.width == 0 || image.height == 0) throw std::invalid_argument(std::string(who) + ": empty image");
  if (image.rgb.size() != size_t{image.width} * image.height * 3) {
    throw std::invalid_argument(std::string(who) + ": rgb holds " + std::to_string(image.rgb.size()) +
                                " bytes, not width * height * 3 for " + std::to_string(image.width) + "x" +
                                std::to_string(image.height));
  }
}

}  // namespace

ImageSize smart_resize(uint32_t width, uint32_t height, const ImageSizeLimits& limits) {
  if (width == 0 || height == 0) {
    throw std::invalid_argument("an image of " + std::to_string(width) + "x" + std::to_string(height) +
                                " pixels has no area");
  }
  if (limits.factor == 0) throw std::invalid_argument("smart_resize: the factor is 0");
  // The same double arithmetic, in the same order, as HF's Python.
  const double h = height, w = width, f = limits.factor;
  const double ratio = std::max(h, w) / std::min(h, w);
  if (ratio > 200.0) {
    throw std::invalid_argument("the image's aspect ratio is " + std::to_string(ratio) + " (" + std::to_string(width) +
                                "x" + std::to_string(height) + "); it must be at most 200");
  }
  double h_bar = round_half_even(h / f) * f;
  double w_bar = round_half_even(w / f) * f;
  const double pixels = static_cast<double>(uint64_t{width} * height);
  if (h_bar * w_bar > static_cast<double>(limits.max_pixels)) {
    const double beta = std::sqrt(pixels / static_cast<double>(limits.max_pixels));
    h_bar = std::max(f, std::floor(h / beta / f) * f);
    w_bar = std::max(f, std::floor(w / beta / f) * f);
  } else if (h_bar * w_bar < static_cast<double>(limits.min_pixels)) {
    const double beta = std::sqrt(static_cast<double>(limits.min_pixels) / pixels);
    h_bar = std::ceil(h * beta / f) * f;
    w_bar = std::ceil(w * beta / f) * f;
  }
  return {to_side(w_bar, "the resized width is out of range"), to_side(h_bar, "the resized height is out of range")};
}

// ---- bicubic resampling ------------------------------------------------------------------------

namespace {

// Keys' cubic convolution kernel with a = -0.5 (PIL's bicubic), in PyTorch's evaluation order
// (cubic_convolution1 / cubic_convolution2), so the double weights round the same way.
double keys_cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
  return 0.0;
}

// One axis of the resampling: output sample i reads `count[i]` source samples from `first[i]`
// with weights[i * stride ...], integers scaled by 2^precision.
struct AxisTaps {
  std::vector<uint32_t> first, count;
  std::vector<int32_t> weights;
  uint32_t stride = 0;
  unsigned precision = 0;
};

AxisTaps bicubic_taps(uint32_t in_size, uint32_t out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  // Downscaling widens the kernel by the scale (the antialias); upscaling keeps its 2-sample radius.
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  AxisTaps taps;
  taps.stride = static_cast<uint32_t>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  std::vector<double> real(size_t{out_size} * taps.stride, 0.0);
  double wt_max = 0.0;
  for (uint32_t i = 0; i < out_size; ++i) {
    const double center = scale * (i + 0.5);
    // The casts truncate toward zero, as PIL's and PyTorch's do.
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t xend = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size);
    const int64_t xsize = std::clamp<int64_t>(xend - xmin, 0, taps.stride);
    double* w = &real[size_t{i} * taps.stride];
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = keys_cubic((static_cast<double>(j + xmin) - center + 0.5) * invscale);
      total += w[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < xsize; ++j) {
        w[j] /= total;
        wt_max = std::max(wt_max, w[j]);
      }
    }
    taps.first[i] = static_cast<uint32_t>(xmin);
    taps.count[i] = static_cast<uint32_t>(xsize);
  }
  // The largest precision (below 22 bits) at which the largest weight still fits an int16.
  for (taps.precision = 0; taps.precision < 22; ++taps.precision) {
    if (static_cast<int>(0.5 + wt_max * (1 << (taps.precision + 1))) >= (1 << 15)) break;
  }
  taps.weights.resize(real.size());
  for (size_t k = 0; k < real.size(); ++k) {
    const double v = real[k] * (1 << taps.precision);
    taps.weights[k] = v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v);
  }
  return taps;
}

uint8_t rounded_sample(int32_t acc, unsigned precision) {
  return static_cast<uint8_t>(std::clamp(acc >> precision, 0, 255));
}

RgbImage resample_rows(const RgbImage& src, uint32_t out_width) {
  const AxisTaps taps = bicubic_taps(src.width, out_width);
  RgbImage out{out_width, src.height, std::vector<uint8_t>(size_t{out_width} * src.height * 3)};
  const int32_t half = int32_t{1} << (taps.precision - 1);
  for (uint32_t y = 0; y < src.height; ++y) {
    const uint8_t* row = &src.rgb[size_t{y} * src.width * 3];
    uint8_t* dst = &out.rgb[size_t{y} * out_width * 3];
    for (uint32_t x = 0; x < out_width; ++x) {
      const int32_t* w = &taps.weights[size_t{x} * taps.stride];
      const uint8_t* s = row + size_t{taps.first[x]} * 3;
      for (int c = 0; c < 3; ++c) {
        int32_t acc = half;
        for (uint32_t j = 0; j < taps.count[x]; ++j) acc += s[j * 3 + c] * w[j];
        dst[x * 3 + c] = rounded_sample(acc, taps.precision);
      }
    }
  }
  return out;
}

RgbImage resample_columns(const RgbImage& src, uint32_t out_height) {
  const AxisTaps taps = bicubic_taps(src.height, out_height);
  const size_t row_bytes = size_t{src.width} * 3;
  RgbImage out{src.width, out_height, std::vector<uint8_t>(row_bytes * out_height)};
  const int32_t half = int32_t{1} << (taps.precision - 1);
  for (uint32_t y = 0; y < out_height; ++y) {
    const int32_t* w = &taps.weights[size_t{y} * taps.stride];
    const uint8_t* s = &src.rgb[size_t{taps.first[y]} * row_bytes];
    uint8_t* dst = &out.rgb[size_t{y} * row_bytes];
    for (size_t k = 0; k < row_bytes; ++k) {
      int32_t acc = half;
      for (uint32_t j = 0; j < taps.count[y]; ++j) acc += s[j * row_bytes + k] * w[j];
      dst[k] = rounded_sample(acc, taps.precision);
    }
  }
  return out;
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& image, uint32_t width, uint32_t height) {
  check_rgb(image, "resize_bicubic");
  if (width == 0 || height == 0) throw std::invalid_argument("resize_bicubic: the target size has no area");
  RgbImage out = image;
  if (width != image.width) out = resample_rows(out, width);
  if (height != image.height) out = resample_columns(out, height);
  return out;
}

// ---- patches -----------------------------------------------------------------------------------

PatchGrid patch_grid(ImageSize size, const PatchLayout& layout) {
  const uint32_t block = layout.patch * layout.merge;
  if (block == 0 || size.width == 0 || size.height == 0 || size.width % block != 0 || size.height % block != 0) {
    throw std::invalid_argument("an image of " + std::to_string(size.width) + "x" + std::to_string(size.height) +
                                " is not a whole number of " + std::to_string(block) + "-pixel merge blocks");
  }
  return {1, size.height / layout.patch, size.width / layout.patch};
}

uint32_t image_token_count(const PatchGrid& grid, uint32_t merge) {
  if (merge == 0 || grid.h % merge != 0 || grid.w % merge != 0) {
    throw std::invalid_argument("a " + std::to_string(grid.h) + "x" + std::to_string(grid.w) +
                                " patch grid does not split into " + std::to_string(merge) + "x" +
                                std::to_string(merge) + " merge blocks");
  }
  return grid.t * (grid.h / merge) * (grid.w / merge);
}

namespace {

// The normalized value of every 8-bit level of each channel. HF's fast processor fuses the 1/255
// rescale into the normalization: mean and std become float32 tensors times 255 (the rescale
// factor's inverse, 255.00000000000003, is 255 in float32), then (x - mean) / std in float32.
std::array<std::array<float, 256>, 3> normalization_table(const PatchLayout& layout) {
  std::array<std::array<float, 256>, 3> table{};
  for (int c = 0; c < 3; ++c) {
    const float mean = layout.mean[c] * 255.0f;
    const float std = layout.std[c] * 255.0f;
    if (!(std != 0.0f)) throw std::invalid_argument("image_patches: a channel's std is 0");
    for (int level = 0; level < 256; ++level) table[c][level] = (static_cast<float>(level) - mean) / std;
  }
  return table;
}

}  // namespace

std::vector<float> image_patches(const RgbImage& image, const PatchLayout& layout) {
  check_rgb(image, "image_patches");
  if (layout.temporal == 0) throw std::invalid_argument("image_patches: temporal is 0");
  const PatchGrid grid = patch_grid({image.width, image.height}, layout);
  const auto table = normalization_table(layout);
  const uint32_t p = layout.patch, m = layout.merge;
  const size_t plane = size_t{p} * p;  // one channel of one frame of a patch
  std::vector<float> out(grid.n_patches() * layout.row_size());
  float* row = out.data();
  for (uint32_t block_row = 0; block_row < grid.h / m; ++block_row) {
    for (uint32_t block_col = 0; block_col < grid.w / m; ++block_col) {
      for (uint32_t in_row = 0; in_row < m; ++in_row) {
        for (uint32_t in_col = 0; in_col < m; ++in_col, row += layout.row_size()) {
          const size_t y0 = size_t{block_row * m + in_row} * p;
          const size_t x0 = size_t{block_col * m + in_col} * p;
          for (int c = 0; c < 3; ++c) {
            float* first_frame = row + size_t(c) * layout.temporal * plane;
            for (uint32_t py = 0; py < p; ++py) {
              const uint8_t* src = &image.rgb[((y0 + py) * image.width + x0) * 3 + c];
              for (uint32_t px = 0; px < p; ++px) first_frame[py * p + px] = table[c][src[px * 3]];
            }
            // A still image is its own second frame (HF repeats the last frame up to `temporal`).
            for (uint32_t t = 1; t < layout.temporal; ++t) {
              std::copy(first_frame, first_frame + plane, first_frame + t * plane);
            }
          }
        }
      }
    }
  }
  return out;
}

PreprocessedImage preprocess_image(const RgbImage& image, const ImageSizeLimits& limits, const PatchLayout& layout) {
  if (limits.factor != layout.patch * layout.merge) {
    throw std::invalid_argument("preprocess_image: the resize factor " + std::to_string(limits.factor) +
                                " is not patch * merge = " + std::to_string(layout.patch * layout.merge));
  }
  const ImageSize target = smart_resize(image.width, image.height, limits);
  PreprocessedImage out;
  out.grid = patch_grid(target, layout);
  if (target == ImageSize{image.width, image.height}) {
    out.pixel_values = image_patches(image, layout);
  } else {
    out.pixel_values = image_patches(resize_bicubic(image, target.width, target.height), layout);
  }
  return out;
}

}  // namespace ds
