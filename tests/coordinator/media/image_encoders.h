// Test-only image writers (through the same Debian libraries' encoders) and hand-built PNG
// chunks, to feed the decoder every color type and hostile header the tests need.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::test {

struct PngSpec {
  uint32_t width = 0, height = 0;
  int color_type = 2;  // PNG_COLOR_TYPE_*
  int bit_depth = 8;
  bool interlaced = false;
  std::vector<uint8_t> rows;     // height rows of packed samples, as the PNG stores them (16-bit big-endian)
  std::vector<uint8_t> palette;  // RGB triples, for color type 3
  std::vector<uint8_t> trns;     // palette alpha, for color type 3
};
std::vector<uint8_t> encode_png(const PngSpec& spec);

// components 1 (JCS_GRAYSCALE), 3 (JCS_RGB) or 4 (JCS_CMYK); progressive: libjpeg's simple
// progression (10 scans for color).
std::vector<uint8_t> encode_jpeg(uint32_t width, uint32_t height, int components, const std::vector<uint8_t>& samples,
                                 int quality = 90, bool progressive = false);

struct GifFrame {
  int left = 0, top = 0, width = 0, height = 0;
  bool interlaced = false;
  std::vector<uint8_t> indices;  // width * height
};
std::vector<uint8_t> encode_gif(int screen_width, int screen_height, const std::vector<uint8_t>& palette_rgb,
                                const GifFrame& frame);

std::vector<uint8_t> encode_webp_lossless_rgba(uint32_t width, uint32_t height, const std::vector<uint8_t>& rgba);

// A PNG chunk: length, type, data, CRC.
std::vector<uint8_t> png_chunk(const std::string& type, const std::vector<uint8_t>& data);
// The signature and an IHDR (8-bit RGB unless told) for a width x height image.
std::vector<uint8_t> png_signature_and_header(uint32_t width, uint32_t height, int color_type = 2, int bit_depth = 8);
// A whole 8-bit RGB PNG of zeros, deflated at level 9 without ever holding the raw rows: a few KB
// that expand to width * height * 3 bytes.
std::vector<uint8_t> png_zero_bomb(uint32_t width, uint32_t height);

}  // namespace ds::test
