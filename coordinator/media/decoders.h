// The per-format decoders behind decode_image (image_decode.h). Each one is handed bytes that
// sniff as its format, checks the header's size with check_image_size before allocating pixels,
// and throws MediaError for anything it cannot decode.
#pragma once

#include <cstdint>
#include <span>

#include "coordinator/media/image_decode.h"

namespace ds::media_detail {

// MediaError when a width x height image of `format` is empty or over `limits`.
void check_image_size(uint64_t width, uint64_t height, const DecodeLimits& limits, const char* format);

RgbImage decode_png(std::span<const uint8_t> bytes, const DecodeLimits& limits);
RgbImage decode_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits);
RgbImage decode_gif(std::span<const uint8_t> bytes, const DecodeLimits& limits);
RgbImage decode_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits);

}  // namespace ds::media_detail
