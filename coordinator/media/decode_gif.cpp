// The first frame of a GIF through giflib's record reader (not DGifSlurp, which would decode every
// frame of an animation). giflib reports errors by return codes, so plain C++ is safe here.
#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/media/decoders.h"

namespace ds::media_detail {

namespace {

struct GifInput {
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
};

int read_gif_input(GifFileType* gif, GifByteType* out, int n) {
  auto* in = static_cast<GifInput*>(gif->UserData);
  const size_t take = std::min(static_cast<size_t>(std::max(n, 0)), in->size - in->pos);
  std::memcpy(out, in->data + in->pos, take);
  in->pos += take;
  return static_cast<int>(take);
}

struct GifCloser {
  void operator()(GifFileType* gif) const {
    int error = 0;
    DGifCloseFile(gif, &error);
  }
};
using GifHandle = std::unique_ptr<GifFileType, GifCloser>;

[[noreturn]] void fail(int error) {
  const char* what = GifErrorString(error);
  if (error == D_GIF_ERR_READ_FAILED) what = "the data ends early (truncated)";
  throw MediaError(std::string("the GIF data cannot be decoded: ") + (what != nullptr ? what : "unknown error"));
}

// Skips an extension block and its sub-blocks (graphic control, comments, application data).
void skip_extension(GifFileType* gif) {
  int code = 0;
  GifByteType* block = nullptr;
  if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) fail(gif->Error);
  while (block != nullptr) {
    if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) fail(gif->Error);
  }
}

// The order in which an interlaced frame's rows arrive: four passes over every 8th, 8th, 4th and
// 2nd row, from rows 0, 4, 2 and 1.
std::vector<int> frame_row_order(int height, bool interlaced) {
  std::vector<int> order;
  order.reserve(static_cast<size_t>(height));
  if (!interlaced) {
    for (int y = 0; y < height; ++y) order.push_back(y);
    return order;
  }
  const int start[] = {0, 4, 2, 1}, step[] = {8, 8, 4, 2};
  for (int pass = 0; pass < 4; ++pass) {
    for (int y = start[pass]; y < height; y += step[pass]) order.push_back(y);
  }
  return order;
}

// Decodes the frame described by gif->Image onto `canvas`, clipped to it; an index outside the
// color map is black.
void draw_frame(GifFileType* gif, RgbImage& canvas) {
  const GifImageDesc& frame = gif->Image;
  const ColorMapObject* colors = frame.ColorMap != nullptr ? frame.ColorMap : gif->SColorMap;
  if (colors == nullptr) throw MediaError("the GIF data cannot be decoded: the frame has no color table");
  std::vector<GifPixelType> line(static_cast<size_t>(frame.Width));
  for (const int row : frame_row_order(frame.Height, frame.Interlace)) {
    if (DGifGetLine(gif, line.data(), frame.Width) == GIF_ERROR) fail(gif->Error);
    const int64_t y = int64_t{frame.Top} + row;
    if (y < 0 || y >= canvas.height) continue;
    for (int x = 0; x < frame.Width; ++x) {
      const int64_t cx = int64_t{frame.Left} + x;
      if (cx < 0 || cx >= canvas.width || line[x] >= colors->ColorCount) continue;
      const GifColorType& c = colors->Colors[line[x]];
      uint8_t* px = &canvas.rgb[(static_cast<size_t>(y) * canvas.width + static_cast<size_t>(cx)) * 3];
      px[0] = c.Red;
      px[1] = c.Green;
      px[2] = c.Blue;
    }
  }
}

}  // namespace

RgbImage decode_gif(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  GifInput input{bytes.data(), bytes.size(), 0};
  int error = 0;
  GifHandle gif(DGifOpen(&input, read_gif_input, &error));
  if (gif == nullptr) fail(error);
  check_image_size(static_cast<uint64_t>(gif->SWidth), static_cast<uint64_t>(gif->SHeight), limits, "GIF");
  for (;;) {
    GifRecordType record = UNDEFINED_RECORD_TYPE;
    if (DGifGetRecordType(gif.get(), &record) == GIF_ERROR) fail(gif->Error);
    if (record == EXTENSION_RECORD_TYPE) {
      skip_extension(gif.get());
    } else if (record == IMAGE_DESC_RECORD_TYPE) {
      if (DGifGetImageDesc(gif.get()) == GIF_ERROR) fail(gif->Error);
      // The frame's own size bounds the decoding work, whatever the canvas it lands on.
      check_image_size(static_cast<uint64_t>(gif->Image.Width), static_cast<uint64_t>(gif->Image.Height), limits,
                       "GIF frame");
      RgbImage canvas{static_cast<uint32_t>(gif->SWidth), static_cast<uint32_t>(gif->SHeight), {}};
      canvas.rgb.assign(size_t{canvas.width} * canvas.height * 3, 0);
      draw_frame(gif.get(), canvas);
      return canvas;
    } else if (record == TERMINATE_RECORD_TYPE) {
      throw MediaError("the GIF data holds no image");
    }
  }
}

}  // namespace ds::media_detail
