// decode_image (coordinator/media/image_decode.h): every format's conversions to RGB as PIL's
// convert("RGB") makes them, and hostile inputs (truncations, lying headers, bombs), each of
// which must end in a MediaError that says what is wrong, never a crash or a huge allocation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "coordinator/media/image_decode.h"
#include "tests/coordinator/media/image_encoders.h"
#include "tests/coordinator/media/vl_fixture.h"

namespace ds {
namespace {

using test::encode_png;
using test::PngSpec;

// The MediaError message decode_image gives `bytes`, or "" when it decodes.
std::string decode_error(const std::vector<uint8_t>& bytes, const DecodeLimits& limits = {}) {
  try {
    decode_image(bytes, limits);
  } catch (const MediaError& e) {
    return e.what();
  }
  return "";
}

PngSpec png_spec(uint32_t width, uint32_t height, int color_type, int bit_depth, std::vector<uint8_t> rows,
                 std::vector<uint8_t> palette = {}, std::vector<uint8_t> trns = {}) {
  PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.color_type = color_type;
  spec.bit_depth = bit_depth;
  spec.rows = std::move(rows);
  spec.palette = std::move(palette);
  spec.trns = std::move(trns);
  return spec;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<uint8_t> rgb_of(const RgbImage& im) {
  return im.rgb;
}

TEST(ImageDecode, SniffsFormatsByTheirLeadingBytes) {
  EXPECT_EQ(sniff_image_format(test::fixture_file("png")), ImageFormat::kPng);
  EXPECT_EQ(sniff_image_format(test::fixture_file("jpeg")), ImageFormat::kJpeg);
  const std::vector<uint8_t> gif = test::encode_gif(2, 2, {0, 0, 0, 255, 255, 255}, {0, 0, 2, 2, false, {0, 1, 1, 0}});
  EXPECT_EQ(sniff_image_format(gif), ImageFormat::kGif);
  const std::vector<uint8_t> webp = test::encode_webp_lossless_rgba(1, 1, {1, 2, 3, 255});
  EXPECT_EQ(sniff_image_format(webp), ImageFormat::kWebp);
  EXPECT_EQ(std::string(image_format_name(ImageFormat::kWebp)), "WebP");
}

TEST(ImageDecode, PngGrayAndPaletteExpandAndAlphaIsDropped) {
  // 8-bit gray: replicated.
  RgbImage im = decode_image(encode_png(png_spec(2, 1, 0, 8, {10, 200})));
  EXPECT_EQ(rgb_of(im), (std::vector<uint8_t>{10, 10, 10, 200, 200, 200}));
  // 1-bit gray: 0 and 255.
  im = decode_image(encode_png(png_spec(8, 1, 0, 1, {0b10100000})));
  EXPECT_EQ(im.rgb[0], 255);
  EXPECT_EQ(im.rgb[3], 0);
  EXPECT_EQ(im.rgb[6], 255);
  // Gray + alpha: the alpha goes, the gray stays (no compositing onto white or black).
  im = decode_image(encode_png(png_spec(2, 1, 4, 8, {90, 0, 90, 255})));
  EXPECT_EQ(rgb_of(im), (std::vector<uint8_t>{90, 90, 90, 90, 90, 90}));
  // RGBA: a fully transparent pixel keeps its color.
  im = decode_image(encode_png(png_spec(2, 1, 6, 8, {1, 2, 3, 0, 250, 251, 252, 128})));
  EXPECT_EQ(rgb_of(im), (std::vector<uint8_t>{1, 2, 3, 250, 251, 252}));
  // Palette with tRNS: the palette colors, transparency ignored.
  im = decode_image(encode_png(png_spec(3, 1, 3, 8, {1, 0, 1}, {9, 8, 7, 60, 70, 80}, {0, 255})));
  EXPECT_EQ(rgb_of(im), (std::vector<uint8_t>{60, 70, 80, 9, 8, 7, 60, 70, 80}));
}

// PIL unpacks 16-bit RGB (RGB;16B) by keeping each sample's high byte: 0x12ff -> 0x12, not 0x13.
TEST(ImageDecode, Png16BitKeepsTheHighByte) {
  const RgbImage im = decode_image(encode_png(png_spec(1, 1, 2, 16, {0x12, 0xff, 0xab, 0x80, 0x00, 0x7f})));
  EXPECT_EQ(rgb_of(im), (std::vector<uint8_t>{0x12, 0xab, 0x00}));
  const RgbImage gray = decode_image(encode_png(png_spec(1, 1, 0, 16, {0x80, 0xff})));
  EXPECT_EQ(rgb_of(gray), (std::vector<uint8_t>{0x80, 0x80, 0x80}));
}

TEST(ImageDecode, InterlacedPngDecodesToTheSamePixels) {
  PngSpec spec = png_spec(13, 11, 2, 8, {});
  for (size_t i = 0; i < 13 * 11 * 3; ++i) spec.rows.push_back(static_cast<uint8_t>(i * 7));
  const RgbImage plain = decode_image(encode_png(spec));
  spec.interlaced = true;
  const RgbImage interlaced = decode_image(encode_png(spec));
  EXPECT_EQ(plain.rgb, spec.rows);
  EXPECT_EQ(interlaced.rgb, spec.rows);
}

TEST(ImageDecode, TruncatedPngIsRefused) {
  const std::vector<uint8_t> png = test::fixture_file("png");
  for (size_t keep : {size_t{8}, size_t{20}, size_t{33}, size_t{100}, png.size() / 2, png.size() - 40}) {
    const std::string error = decode_error({png.begin(), png.begin() + static_cast<std::ptrdiff_t>(keep)});
    EXPECT_TRUE(contains(error, "PNG") && contains(error, "truncated")) << keep << ": " << error;
  }
}

TEST(ImageDecode, CorruptPngDataIsRefused) {
  std::vector<uint8_t> png = test::fixture_file("png");
  png[png.size() / 2] ^= 0x55;  // inside IDAT: its CRC no longer matches
  EXPECT_TRUE(contains(decode_error(png), "the PNG data cannot be decoded")) << decode_error(png);
  std::vector<uint8_t> header = test::png_signature_and_header(4, 4);
  header[20] ^= 1;  // IHDR's CRC
  EXPECT_TRUE(contains(decode_error(header), "PNG")) << decode_error(header);
}

// A 71-byte file whose header claims 20000x20000 pixels (an IDAT of two bytes follows): refused
// from the header, before any row buffer.
std::vector<uint8_t> png_claiming(uint32_t width, uint32_t height) {
  std::vector<uint8_t> png = test::png_signature_and_header(width, height);
  for (const auto& chunk : {test::png_chunk("IDAT", {0x78, 0x9c}), test::png_chunk("IEND", {})}) {
    png.insert(png.end(), chunk.begin(), chunk.end());
  }
  return png;
}

TEST(ImageDecode, PngHeaderOverTheLimitsIsRefused) {
  const std::string error = decode_error(png_claiming(20000, 20000));
  EXPECT_TRUE(contains(error, "20000x20000 pixels; the limit is 16384x16384")) << error;
  const std::string many = decode_error(png_claiming(16000, 16000));
  EXPECT_TRUE(contains(many, "256000000 pixels; the limit is 50000000")) << many;
  // Within the limits, the same file fails only for its missing data.
  EXPECT_TRUE(contains(decode_error(png_claiming(64, 64)), "cannot be decoded")) << decode_error(png_claiming(64, 64));
}

// A few KB of deflated zeros that expand to 12 MB of pixels: within the default limits it is a
// valid image; a tighter pixel limit stops it at the header, before inflating anything.
TEST(ImageDecode, ZlibBombIsStoppedByThePixelLimit) {
  const std::vector<uint8_t> bomb = test::png_zero_bomb(2048, 2048);
  ASSERT_LT(bomb.size(), 32u * 1024);
  const RgbImage im = decode_image(bomb);
  EXPECT_EQ(im.width, 2048u);
  EXPECT_EQ(im.rgb[im.rgb.size() - 1], 0);
  DecodeLimits tight;
  tight.max_pixels = 1'000'000;
  EXPECT_TRUE(contains(decode_error(bomb, tight), "4194304 pixels; the limit is 1000000")) << decode_error(bomb, tight);
}

TEST(ImageDecode, JpegGrayscaleExpandsToRgb) {
  std::vector<uint8_t> gray(16 * 8);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i * 2);
  const RgbImage im = decode_image(test::encode_jpeg(16, 8, 1, gray, 100));
  ASSERT_EQ(im.rgb.size(), 16u * 8 * 3);
  for (size_t p = 0; p < 16 * 8; ++p) {
    EXPECT_EQ(im.rgb[p * 3], im.rgb[p * 3 + 1]);
    EXPECT_EQ(im.rgb[p * 3], im.rgb[p * 3 + 2]);
    EXPECT_NEAR(im.rgb[p * 3], gray[p], 3);  // quality 100: a JPEG round trip within a few levels
  }
}

// A progressive JPEG decodes like its baseline twin; past the scan limit it is refused.
TEST(ImageDecode, ProgressiveJpegDecodesAndItsScansAreLimited) {
  std::vector<uint8_t> rgb(24 * 16 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 5);
  const std::vector<uint8_t> progressive = test::encode_jpeg(24, 16, 3, rgb, 90, true);
  const RgbImage im = decode_image(progressive);
  EXPECT_EQ(im.width, 24u);
  DecodeLimits few;
  few.max_jpeg_scans = 3;
  EXPECT_TRUE(contains(decode_error(progressive, few), "more than 3 progressive scans"))
      << decode_error(progressive, few);
}

TEST(ImageDecode, CmykJpegIsRefused) {
  const std::vector<uint8_t> cmyk(8 * 8 * 4, 100);
  EXPECT_TRUE(contains(decode_error(test::encode_jpeg(8, 8, 4, cmyk)), "CMYK"));
}

TEST(ImageDecode, TruncatedJpegIsRefused) {
  const std::vector<uint8_t> jpeg = test::fixture_file("jpeg");
  for (size_t keep : {size_t{3}, size_t{100}, jpeg.size() / 2, jpeg.size() - 2}) {
    const std::string error = decode_error({jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(keep)});
    EXPECT_TRUE(contains(error, "JPEG") && contains(error, "cannot be decoded")) << keep << ": " << error;
  }
  EXPECT_TRUE(
      contains(decode_error({jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() / 2)}), "truncated"));
}

// The fixture JPEG with its frame header (SOF) rewritten to claim 20000x20000.
TEST(ImageDecode, JpegHeaderOverTheLimitsIsRefused) {
  std::vector<uint8_t> jpeg = test::fixture_file("jpeg");
  size_t sof = 2;
  while (sof + 4 < jpeg.size() && !(jpeg[sof] == 0xff && (jpeg[sof + 1] == 0xc0 || jpeg[sof + 1] == 0xc2))) {
    sof += 2 + (size_t{jpeg[sof + 2]} << 8 | jpeg[sof + 3]);
  }
  ASSERT_LT(sof + 9, jpeg.size());
  for (size_t at : {sof + 5, sof + 7}) {  // height, then width, big-endian
    jpeg[at] = 20000 >> 8;
    jpeg[at + 1] = 20000 & 0xff;
  }
  EXPECT_TRUE(contains(decode_error(jpeg), "20000x20000")) << decode_error(jpeg);
}

TEST(ImageDecode, GifFirstFrameLandsOnItsScreen) {
  const std::vector<uint8_t> palette = {0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255};
  test::GifFrame frame{2, 1, 3, 2, false, {1, 2, 3, 3, 2, 1}};
  const RgbImage im = decode_image(test::encode_gif(6, 4, palette, frame));
  ASSERT_EQ(im.width, 6u);
  ASSERT_EQ(im.height, 4u);
  auto pixel = [&](uint32_t x, uint32_t y) {
    return std::vector<uint8_t>(im.rgb.begin() + (y * 6 + x) * 3, im.rgb.begin() + (y * 6 + x) * 3 + 3);
  };
  EXPECT_EQ(pixel(2, 1), (std::vector<uint8_t>{255, 0, 0}));
  EXPECT_EQ(pixel(4, 1), (std::vector<uint8_t>{0, 0, 255}));
  EXPECT_EQ(pixel(2, 2), (std::vector<uint8_t>{0, 0, 255}));
  EXPECT_EQ(pixel(0, 0), (std::vector<uint8_t>{0, 0, 0}));  // outside the frame: black
}

TEST(ImageDecode, InterlacedGifRowsReturnToTheirPlace) {
  test::GifFrame frame{0, 0, 1, 11, true, {}};
  for (uint8_t y = 0; y < 11; ++y) frame.indices.push_back(y);
  std::vector<uint8_t> palette;
  for (int i = 0; i < 16; ++i) palette.insert(palette.end(), {uint8_t(i * 10), 0, 0});
  const RgbImage im = decode_image(test::encode_gif(1, 11, palette, frame));
  for (uint32_t y = 0; y < 11; ++y) EXPECT_EQ(im.rgb[y * 3], y * 10) << y;
}

TEST(ImageDecode, GifOverTheLimitsOrTruncatedIsRefused) {
  const std::vector<uint8_t> palette = {0, 0, 0, 255, 255, 255};
  const std::vector<uint8_t> big = test::encode_gif(20000, 20000, palette, {0, 0, 1, 1, false, {1}});
  EXPECT_TRUE(contains(decode_error(big), "20000x20000")) << decode_error(big);
  const std::vector<uint8_t> gif = test::encode_gif(16, 16, palette, {0, 0, 16, 16, false, std::vector<uint8_t>(256)});
  const std::string error = decode_error({gif.begin(), gif.end() - 10});
  EXPECT_TRUE(contains(error, "GIF")) << error;
}

TEST(ImageDecode, WebpDropsAlpha) {
  const std::vector<uint8_t> rgba = {10, 20, 30, 255, 40, 50, 60, 128, 70, 80, 90, 255, 1, 2, 3, 200};
  const RgbImage im = decode_image(test::encode_webp_lossless_rgba(2, 2, rgba));
  EXPECT_EQ(rgb_of(im), (std::vector<uint8_t>{10, 20, 30, 40, 50, 60, 70, 80, 90, 1, 2, 3}));
  const std::vector<uint8_t> webp = test::encode_webp_lossless_rgba(2, 2, rgba);
  EXPECT_TRUE(contains(decode_error({webp.begin(), webp.begin() + 20}), "WebP"));
}

// A WebP container whose VP8X header sets the animation flag.
TEST(ImageDecode, AnimatedWebpIsRefused) {
  std::vector<uint8_t> webp = {'R', 'I', 'F', 'F', 22, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', 'X', 10, 0, 0, 0};
  webp.insert(webp.end(), {0x02, 0, 0, 0, 9, 0, 0, 9, 0, 0});
  EXPECT_TRUE(contains(decode_error(webp), "animated")) << decode_error(webp);
}

TEST(ImageDecode, UnknownFormatsAndEmptyInputAreNamed) {
  EXPECT_EQ(decode_error({}), "the image data is empty");
  const std::string bmp = decode_error({'B', 'M', 0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_TRUE(contains(bmp, "BMP")) << bmp;
  const std::string html = decode_error({'<', 'h', 't', 'm', 'l', '>'});
  EXPECT_TRUE(contains(html, "3c 68 74 6d 6c 3e") && contains(html, "PNG, JPEG, WebP or GIF")) << html;
}

}  // namespace
}  // namespace ds
