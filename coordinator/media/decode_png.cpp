// PNG through libpng's low-level reader. libpng reports errors by longjmp, so every call into it
// happens inside one of the small read_* functions below, which hold only trivially destructible
// locals: a longjmp out of libpng lands in the same function and skips no destructor. The C++
// caller owns the libpng structures (PngReader's destructor frees them) and throws MediaError.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "coordinator/media/decoders.h"

namespace ds::media_detail {

namespace {

struct PngInput {
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
};

struct PngHeader {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
};

// What libpng's callbacks reach. It lives in the C++ caller's frame, never in a frame a longjmp
// crosses, so it may free the libpng structures when it goes.
struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  PngInput input;
  char message[256] = {};

  PngState() = default;
  PngState(const PngState&) = delete;
  PngState& operator=(const PngState&) = delete;
  ~PngState() { png_destroy_read_struct(&png, &info, nullptr); }
};

void on_png_error(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof state->message, "%s", message);
  png_longjmp(png, 1);
}

// libpng warns about what it recovers from (a bad ancillary chunk's CRC, extra compressed data);
// PIL decodes those images too.
void on_png_warning(png_structp, png_const_charp) {}

void read_png_input(png_structp png, png_bytep out, size_t n) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  PngInput& in = state->input;
  if (n > in.size - in.pos) png_error(png, "the data ends early (truncated)");
  std::memcpy(out, in.data + in.pos, n);
  in.pos += n;
}

// Skips the chunks whose contents we never use, some of them compressed (a decompression bomb
// hides there as easily as in the image data).
bool configure_png_reader(PngState& s) {
  if (setjmp(png_jmpbuf(s.png))) return false;
  png_set_read_fn(s.png, &s, read_png_input);
  static const png_byte kIgnored[] = "iCCP\0iTXt\0tEXt\0zTXt\0eXIf\0sPLT\0";
  png_set_keep_unknown_chunks(s.png, PNG_HANDLE_CHUNK_NEVER, kIgnored, 6);
  return true;
}

bool read_png_header(PngState& s, PngHeader& header) {
  if (setjmp(png_jmpbuf(s.png))) return false;
  png_read_info(s.png, s.info);
  png_get_IHDR(s.png, s.info, &header.width, &header.height, &header.bit_depth, &header.color_type, nullptr, nullptr,
               nullptr);
  return true;
}

// Asks libpng for 8-bit RGB rows, as PIL's convert("RGB") makes them: palette and gray expanded,
// alpha (and a palette's tRNS) dropped without compositing, 16-bit samples cut to their high byte,
// all interlace passes combined. Leaves the row size in `row_bytes`.
bool request_rgb8_rows(PngState& s, const PngHeader& h, size_t& row_bytes) {
  if (setjmp(png_jmpbuf(s.png))) return false;
  if (h.bit_depth == 16) png_set_strip_16(s.png);
  if (h.color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s.png);
  if ((h.color_type & PNG_COLOR_MASK_COLOR) == 0) {
    if (h.bit_depth < 8) png_set_expand_gray_1_2_4_to_8(s.png);
    png_set_gray_to_rgb(s.png);
  }
  png_set_strip_alpha(s.png);
  png_set_interlace_handling(s.png);
  png_read_update_info(s.png, s.info);
  if (png_get_channels(s.png, s.info) != 3 || png_get_bit_depth(s.png, s.info) != 8) {
    png_error(s.png, "libpng did not produce 8-bit RGB for this PNG");
  }
  row_bytes = png_get_rowbytes(s.png, s.info);
  return true;
}

bool read_png_rows(PngState& s, png_bytepp rows) {
  if (setjmp(png_jmpbuf(s.png))) return false;
  png_read_image(s.png, rows);
  return true;
}

// Owns the libpng structures (through its PngState); throws from C++ code only, never inside libpng.
class PngReader {
 public:
  explicit PngReader(std::span<const uint8_t> bytes) {
    state_.input = {bytes.data(), bytes.size(), 0};
    state_.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state_, on_png_error, on_png_warning);
    if (state_.png != nullptr) state_.info = png_create_info_struct(state_.png);
    if (state_.png == nullptr || state_.info == nullptr) throw MediaError("out of memory starting the PNG decoder");
    if (!configure_png_reader(state_)) fail();
  }

  PngState& state() { return state_; }
  [[noreturn]] void fail() const {
    throw MediaError(std::string("the PNG data cannot be decoded: ") +
                     (state_.message[0] ? state_.message : "unknown error"));
  }

 private:
  PngState state_;
};

}  // namespace

RgbImage decode_png(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  PngReader reader(bytes);
  PngState& s = reader.state();
  PngHeader header;
  if (!read_png_header(s, header)) reader.fail();
  check_image_size(header.width, header.height, limits, "PNG");
  size_t row_bytes = 0;
  if (!request_rgb8_rows(s, header, row_bytes)) reader.fail();
  if (row_bytes != size_t{header.width} * 3) throw MediaError("the PNG decoder produced rows of an unexpected size");
  RgbImage image{header.width, header.height, std::vector<uint8_t>(row_bytes * header.height)};
  std::vector<png_bytep> rows(header.height);
  for (png_uint_32 y = 0; y < header.height; ++y) rows[y] = image.rgb.data() + row_bytes * y;
  if (!read_png_rows(s, rows.data())) reader.fail();
  return image;
}

}  // namespace ds::media_detail
