// JPEG through libjpeg-turbo's libjpeg API. libjpeg reports errors through error_exit, which
// must not return: ours longjmps. As for PNG, every libjpeg call sits in a small function with
// only trivially destructible locals, so the longjmp skips no destructor; the C++ caller owns the
// decompressor (JpegState's destructor frees it) and throws MediaError.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

// jpeglib.h needs size_t and FILE declared before it.
#include <jerror.h>
#include <jpeglib.h>

#include "coordinator/media/decoders.h"

namespace ds::media_detail {

namespace {

struct JpegErrors {
  jpeg_error_mgr base;  // first: libjpeg hands callbacks a pointer to it
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
};

struct JpegProgress {
  jpeg_progress_mgr base;  // first, as above
  int max_scans = 0;
};

[[noreturn]] void stop_decoding(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  std::longjmp(errors->jump, 1);
}

void on_jpeg_error(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  stop_decoding(cinfo);
}

// libjpeg only warns when the data ends early and then decodes the rest as gray; PIL refuses such
// an image ("image file is truncated"), and so do we. Other warnings (extraneous bytes before a
// marker, ...) describe images that decode fine.
void on_jpeg_message(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
    std::snprintf(errors->message, sizeof errors->message, "the data ends early (truncated)");
    stop_decoding(cinfo);
  }
}

void on_jpeg_progress(j_common_ptr cinfo) {
  const auto* progress = reinterpret_cast<const JpegProgress*>(cinfo->progress);
  const auto* dinfo = reinterpret_cast<const jpeg_decompress_struct*>(cinfo);
  if (dinfo->input_scan_number > progress->max_scans) {
    auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
    std::snprintf(errors->message, sizeof errors->message, "it has more than %d progressive scans",
                  progress->max_scans);
    stop_decoding(cinfo);
  }
}

// Lives in the C++ caller's frame, never in one a longjmp crosses.
struct JpegState {
  jpeg_decompress_struct cinfo{};
  JpegErrors errors{};
  JpegProgress progress{};
  bool created = false;

  JpegState() = default;
  JpegState(const JpegState&) = delete;
  JpegState& operator=(const JpegState&) = delete;
  ~JpegState() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

bool start_jpeg_reader(JpegState& s, std::span<const uint8_t> bytes, long max_memory) {
  s.cinfo.err = jpeg_std_error(&s.errors.base);
  s.errors.base.error_exit = on_jpeg_error;
  s.errors.base.emit_message = on_jpeg_message;
  if (setjmp(s.errors.jump)) return false;
  jpeg_create_decompress(&s.cinfo);
  s.created = true;
  s.cinfo.mem->max_memory_to_use = max_memory;
  s.progress.base.progress_monitor = on_jpeg_progress;
  s.cinfo.progress = &s.progress.base;
  jpeg_mem_src(&s.cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&s.cinfo, TRUE);
  return true;
}

// Requests RGB with PIL's decoder settings: the accurate integer IDCT and fancy upsampling.
bool start_rgb_output(JpegState& s) {
  if (setjmp(s.errors.jump)) return false;
  s.cinfo.out_color_space = JCS_RGB;
  s.cinfo.dct_method = JDCT_ISLOW;
  s.cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&s.cinfo);
  return true;
}

bool read_jpeg_rows(JpegState& s, uint8_t* rgb, size_t row_bytes) {
  if (setjmp(s.errors.jump)) return false;
  while (s.cinfo.output_scanline < s.cinfo.output_height) {
    JSAMPROW row = rgb + row_bytes * s.cinfo.output_scanline;
    jpeg_read_scanlines(&s.cinfo, &row, 1);
  }
  return true;
}

[[noreturn]] void fail(const JpegState& s) {
  throw MediaError(std::string("the JPEG data cannot be decoded: ") +
                   (s.errors.message[0] ? s.errors.message : "unknown error"));
}

}  // namespace

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  JpegState s;
  s.progress.max_scans = static_cast<int>(limits.max_jpeg_scans);
  // A progressive image keeps every coefficient (2 bytes a sample, up to 3 samples a pixel) in
  // memory; anything past that plus working room is a hostile header.
  const long max_memory = static_cast<long>(limits.max_pixels * 6 + (64 << 20));
  if (!start_jpeg_reader(s, bytes, max_memory)) fail(s);
  check_image_size(s.cinfo.image_width, s.cinfo.image_height, limits, "JPEG");
  if (s.cinfo.jpeg_color_space == JCS_CMYK || s.cinfo.jpeg_color_space == JCS_YCCK) {
    throw MediaError("CMYK JPEG images are not supported; send an RGB or grayscale JPEG");
  }
  if (!start_rgb_output(s)) fail(s);
  if (s.cinfo.output_components != 3 || s.cinfo.output_width != s.cinfo.image_width ||
      s.cinfo.output_height != s.cinfo.image_height) {
    throw MediaError("the JPEG decoder produced an unexpected output shape");
  }
  RgbImage image{s.cinfo.output_width, s.cinfo.output_height, {}};
  const size_t row_bytes = size_t{image.width} * 3;
  image.rgb.resize(row_bytes * image.height);
  if (!read_jpeg_rows(s, image.rgb.data(), row_bytes)) fail(s);
  return image;
}

}  // namespace ds::media_detail
