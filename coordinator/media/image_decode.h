// Decoding a request's image bytes into 8-bit RGB, as PIL's Image.open(...).convert("RGB") sees
// them (what the HF processor is handed): PNG (libpng), JPEG (libjpeg-turbo), WebP (libwebp) and
// the first frame of a GIF (giflib), recognized by their leading bytes, never by a MIME type.
//
// Conversions, PIL's unless said otherwise:
// - alpha is dropped, not composited (convert("RGB") discards it); a palette or gray image is
//   expanded; 1/2/4-bit gray is scaled to 0..255; gAMA, iCCP and EXIF orientation are ignored.
// - 16-bit PNG keeps each sample's high byte, as PIL's RGB;16B unpacking does. (PIL opens 16-bit
//   gray as mode I;16 and convert("RGB") then saturates it at 255, which whitens the image; we
//   keep the high byte there too.)
// - JPEG: accurate integer IDCT with fancy upsampling, PIL's defaults; CMYK/YCCK JPEGs are refused.
// - GIF: the first frame on its logical screen; pixels the frame does not cover are black.
// - WebP: a still image; an animated WebP is refused.
//
// Every limit is checked against the header before any pixel buffer is allocated, and every
// failure (truncated or corrupt data, an unknown format, a limit) throws MediaError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "common/image_patches.h"

namespace ds {

// An image input that cannot be used. The message names the problem in terms a client can act
// on, fit for the body of a 400 response.
class MediaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct DecodeLimits {
  uint32_t max_width = 16384;
  uint32_t max_height = 16384;
  // The decoded RGB buffer is 3 bytes a pixel: 150 MB at the default.
  uint64_t max_pixels = 50'000'000;
  // A progressive JPEG may hold any number of scans, each a pass over the whole image; real ones
  // have about ten (a decoder's time is the cost this bounds).
  uint32_t max_jpeg_scans = 256;
};

enum class ImageFormat { kUnknown, kPng, kJpeg, kWebp, kGif };

// The format the leading bytes show.
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);

// "PNG", "JPEG", "WebP", "GIF"; "unknown".
const char* image_format_name(ImageFormat format);

// The image as 8-bit RGB; MediaError when the bytes are not a whole image of a supported format
// within `limits`.
RgbImage decode_image(std::span<const uint8_t> bytes, const DecodeLimits& limits = {});

}  // namespace ds
