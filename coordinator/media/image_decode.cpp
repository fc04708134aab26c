#include "coordinator/media/image_decode.h"

#include <webp/decode.h>

#include <cstring>
#include <string>

#include "coordinator/media/decoders.h"

namespace ds {

namespace {

bool starts_with(std::span<const uint8_t> bytes, size_t at, const char* magic, size_t n) {
  return bytes.size() >= at + n && std::memcmp(bytes.data() + at, magic, n) == 0;
}

// Formats we recognize only to say so in the error.
const char* unsupported_format_name(std::span<const uint8_t> b) {
  if (starts_with(b, 0, "BM", 2)) return "BMP";
  if (starts_with(b, 0, "II*\0", 4) || starts_with(b, 0, "MM\0*", 4)) return "TIFF";
  if (starts_with(b, 4, "ftypheic", 8) || starts_with(b, 4, "ftypheix", 8) || starts_with(b, 4, "ftypmif1", 8)) {
    return "HEIF/HEIC";
  }
  if (starts_with(b, 4, "ftypavif", 8)) return "AVIF";
  if (starts_with(b, 0, "\0\0\1\0", 4)) return "ICO";
  if (starts_with(b, 0, "%PDF", 4)) return "PDF";
  if (starts_with(b, 0, "<svg", 4) || starts_with(b, 0, "<?xml", 5)) return "SVG/XML";
  if (starts_with(b, 0, "\xff\x0a", 2) || starts_with(b, 4, "jP  ", 4)) return "JPEG XL / JPEG 2000";
  return nullptr;
}

std::string leading_bytes_hex(std::span<const uint8_t> bytes) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < bytes.size() && i < 8; ++i) {
    if (i > 0) s += ' ';
    s += hex[bytes[i] >> 4];
    s += hex[bytes[i] & 15];
  }
  return s;
}

[[noreturn]] void unsupported(std::span<const uint8_t> bytes) {
  const std::string accepted = "; send PNG, JPEG, WebP or GIF";
  if (const char* name = unsupported_format_name(bytes)) {
    throw MediaError(std::string("unsupported image format: the data is ") + name + accepted);
  }
  throw MediaError("unrecognized image data (it starts with bytes " + leading_bytes_hex(bytes) + ")" + accepted);
}

}  // namespace

ImageFormat sniff_image_format(std::span<const uint8_t> b) {
  if (starts_with(b, 0, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (starts_with(b, 0, "\xff\xd8\xff", 3)) return ImageFormat::kJpeg;
  if (starts_with(b, 0, "GIF87a", 6) || starts_with(b, 0, "GIF89a", 6)) return ImageFormat::kGif;
  if (starts_with(b, 0, "RIFF", 4) && starts_with(b, 8, "WEBP", 4)) return ImageFormat::kWebp;
  return ImageFormat::kUnknown;
}

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kGif:
      return "GIF";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

RgbImage decode_image(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  if (bytes.empty()) throw MediaError("the image data is empty");
  switch (sniff_image_format(bytes)) {
    case ImageFormat::kPng:
      return media_detail::decode_png(bytes, limits);
    case ImageFormat::kJpeg:
      return media_detail::decode_jpeg(bytes, limits);
    case ImageFormat::kWebp:
      return media_detail::decode_webp(bytes, limits);
    case ImageFormat::kGif:
      return media_detail::decode_gif(bytes, limits);
    case ImageFormat::kUnknown:
      break;
  }
  unsupported(bytes);
}

namespace media_detail {

void check_image_size(uint64_t width, uint64_t height, const DecodeLimits& limits, const char* format) {
  const std::string size = std::to_string(width) + "x" + std::to_string(height);
  if (width == 0 || height == 0) throw MediaError(std::string("the ") + format + " image is empty (" + size + ")");
  if (width > limits.max_width || height > limits.max_height) {
    throw MediaError(std::string("the ") + format + " image is " + size + " pixels; the limit is " +
                     std::to_string(limits.max_width) + "x" + std::to_string(limits.max_height));
  }
  if (width * height > limits.max_pixels) {
    throw MediaError(std::string("the ") + format + " image is " + size + " = " + std::to_string(width * height) +
                     " pixels; the limit is " + std::to_string(limits.max_pixels));
  }
}

RgbImage decode_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) throw MediaError("the WebP data is truncated");
  if (status != VP8_STATUS_OK) throw MediaError("the WebP data is corrupt (bad header)");
  if (features.has_animation) throw MediaError("animated WebP images are not supported; send a still image");
  check_image_size(static_cast<uint32_t>(features.width), static_cast<uint32_t>(features.height), limits, "WebP");
  RgbImage image{static_cast<uint32_t>(features.width), static_cast<uint32_t>(features.height), {}};
  image.rgb.resize(size_t{image.width} * image.height * 3);
  // Alpha, when present, is decoded separately and simply not asked for: RGB stays unpremultiplied.
  if (WebPDecodeRGBInto(bytes.data(), bytes.size(), image.rgb.data(), image.rgb.size(),
                        static_cast<int>(image.width * 3)) == nullptr) {
    throw MediaError("the WebP data is corrupt or truncated");
  }
  return image;
}

}  // namespace media_detail

}  // namespace ds
