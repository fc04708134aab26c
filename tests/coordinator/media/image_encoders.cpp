#include "tests/coordinator/media/image_encoders.h"

#include <gif_lib.h>
#include <png.h>
#include <webp/encode.h>
#include <zlib.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

// jpeglib.h needs size_t and FILE declared before it.
#include <jpeglib.h>

namespace ds::test {

namespace {

void append_png_bytes(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

void flush_nothing(png_structp) {}

// Only trivially destructible locals: libpng's errors longjmp back here.
bool write_png(png_structp png, png_infop info, const PngSpec& spec, std::vector<uint8_t>* out, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, out, append_png_bytes, flush_nothing);
  png_set_IHDR(png, info, spec.width, spec.height, spec.bit_depth, spec.color_type,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!spec.palette.empty()) {
    png_set_PLTE(png, info, reinterpret_cast<png_const_colorp>(spec.palette.data()),
                 static_cast<int>(spec.palette.size() / 3));
  }
  if (!spec.trns.empty()) png_set_tRNS(png, info, spec.trns.data(), static_cast<int>(spec.trns.size()), nullptr);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  return true;
}

}  // namespace

std::vector<uint8_t> encode_png(const PngSpec& spec) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  const size_t row_bytes = spec.rows.size() / spec.height;
  std::vector<png_bytep> rows(spec.height);
  for (uint32_t y = 0; y < spec.height; ++y) rows[y] = const_cast<png_bytep>(spec.rows.data() + row_bytes * y);
  std::vector<uint8_t> out;
  const bool ok = write_png(png, info, spec, &out, rows.data());
  png_destroy_write_struct(&png, &info);
  if (!ok) throw std::runtime_error("encode_png failed");
  return out;
}

std::vector<uint8_t> encode_jpeg(uint32_t width, uint32_t height, int components, const std::vector<uint8_t>& samples,
                                 int quality, bool progressive) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);  // the default error_exit exits: fine for test inputs we build
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < height) {
    JSAMPROW row = const_cast<JSAMPROW>(samples.data() + size_t{cinfo.next_scanline} * width * components);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> out(buffer, buffer + size);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return out;
}

namespace {

int append_gif_bytes(GifFileType* gif, const GifByteType* data, int n) {
  auto* out = static_cast<std::vector<uint8_t>*>(gif->UserData);
  out->insert(out->end(), data, data + n);
  return n;
}

}  // namespace

std::vector<uint8_t> encode_gif(int screen_width, int screen_height, const std::vector<uint8_t>& palette_rgb,
                                const GifFrame& frame) {
  std::vector<uint8_t> out;
  int error = 0;
  GifFileType* gif = EGifOpen(&out, append_gif_bytes, &error);
  const int colors = static_cast<int>(palette_rgb.size() / 3);
  ColorMapObject* map = GifMakeMapObject(colors, reinterpret_cast<const GifColorType*>(palette_rgb.data()));
  bool ok = gif != nullptr && map != nullptr;
  ok = ok && EGifPutScreenDesc(gif, screen_width, screen_height, 8, 0, map) == GIF_OK;
  ok = ok &&
       EGifPutImageDesc(gif, frame.left, frame.top, frame.width, frame.height, frame.interlaced, nullptr) == GIF_OK;
  // An interlaced frame's rows go out in pass order (every 8th from 0, every 8th from 4, ...).
  const int start[] = {0, 4, 2, 1}, step[] = {8, 8, 4, 2};
  for (int pass = 0; ok && pass < (frame.interlaced ? 4 : 1); ++pass) {
    const int y0 = frame.interlaced ? start[pass] : 0, dy = frame.interlaced ? step[pass] : 1;
    for (int y = y0; ok && y < frame.height; y += dy) {
      auto* line = const_cast<GifPixelType*>(frame.indices.data() + size_t(y) * frame.width);
      ok = EGifPutLine(gif, line, frame.width) == GIF_OK;
    }
  }
  if (gif != nullptr) ok = EGifCloseFile(gif, &error) == GIF_OK && ok;
  GifFreeMapObject(map);
  if (!ok) throw std::runtime_error("encode_gif failed");
  return out;
}

std::vector<uint8_t> encode_webp_lossless_rgba(uint32_t width, uint32_t height, const std::vector<uint8_t>& rgba) {
  uint8_t* data = nullptr;
  const size_t size =
      WebPEncodeLosslessRGBA(rgba.data(), static_cast<int>(width), static_cast<int>(height), int(width * 4), &data);
  if (size == 0) throw std::runtime_error("encode_webp failed");
  std::vector<uint8_t> out(data, data + size);
  WebPFree(data);
  return out;
}

std::vector<uint8_t> png_chunk(const std::string& type, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  const uint32_t n = static_cast<uint32_t>(data.size());
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(n >> s));
  out.insert(out.end(), type.begin(), type.end());
  out.insert(out.end(), data.begin(), data.end());
  const uint32_t crc = static_cast<uint32_t>(crc32(0, out.data() + 4, static_cast<uInt>(out.size() - 4)));
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(crc >> s));
  return out;
}

std::vector<uint8_t> png_signature_and_header(uint32_t width, uint32_t height, int color_type, int bit_depth) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  for (uint32_t v : {width, height}) {
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(static_cast<uint8_t>(v >> s));
  }
  ihdr.insert(ihdr.end(), {static_cast<uint8_t>(bit_depth), static_cast<uint8_t>(color_type), 0, 0, 0});
  const std::vector<uint8_t> chunk = png_chunk("IHDR", ihdr);
  out.insert(out.end(), chunk.begin(), chunk.end());
  return out;
}

std::vector<uint8_t> png_zero_bomb(uint32_t width, uint32_t height) {
  z_stream z{};
  deflateInit(&z, 9);
  const std::vector<uint8_t> row(size_t{width} * 3 + 1, 0);  // filter byte 0, then black pixels
  std::vector<uint8_t> compressed, buffer(1 << 16);
  for (uint32_t y = 0; y < height; ++y) {
    z.next_in = const_cast<Bytef*>(row.data());
    z.avail_in = static_cast<uInt>(row.size());
    const int flush = y + 1 == height ? Z_FINISH : Z_NO_FLUSH;
    do {
      z.next_out = buffer.data();
      z.avail_out = static_cast<uInt>(buffer.size());
      deflate(&z, flush);
      compressed.insert(compressed.end(), buffer.data(), buffer.data() + (buffer.size() - z.avail_out));
    } while (z.avail_out == 0);
  }
  deflateEnd(&z);
  std::vector<uint8_t> out = png_signature_and_header(width, height);
  for (const auto& chunk : {png_chunk("IDAT", compressed), png_chunk("IEND", {})}) {
    out.insert(out.end(), chunk.begin(), chunk.end());
  }
  return out;
}

}  // namespace ds::test
