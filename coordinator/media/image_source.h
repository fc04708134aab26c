// From an OpenAI content part's image_url.url to the image's bytes (and, with decode_image, its
// pixels). Accepted:
// - data:image/<type>[;params];base64,<data>: the MIME type must be image/*; what it names is
//   not checked against the data (the decoder goes by the data's leading bytes, as vLLM and
//   llama.cpp do), so data:image/png holding a JPEG decodes as the JPEG. Only base64 data URLs.
// - bare base64 (no scheme), as llama.cpp and some clients send it.
// - file:///path, only when a media root is configured and the path (every symlink resolved)
//   lies inside it.
// - http:// and https://, only for hosts on the allow-list (allowed_media_domains; empty, the
//   default, refuses every remote URL), downloaded under http_fetch.h's rules: public addresses
//   only (unless the entry is an IP literal), verified TLS, at most 3 redirects within the host,
//   an image Content-Type, max_image_bytes and one deadline (fetch_timeout) for the whole download.
// Refused with MediaError: any other scheme, and inputs over max_image_bytes. Base64 is decoded strictly
// (common/base64.h): whitespace is skipped, any other character outside the standard alphabet is an error.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/media/image_decode.h"

namespace ds {

struct ImageSourceOptions {
  // The directory file:// URLs may read from; empty turns file:// off.
  std::string media_root;
  // The most bytes one image may hold, encoded (the file, or the base64's decoded size).
  size_t max_image_bytes = size_t{20} << 20;
  // The hosts http(s):// URLs may name (remote_url.h: exact names, *.domain, IP literals); empty
  // turns remote URLs off.
  std::vector<std::string> allowed_media_domains{};
  // One remote image's whole download (lookup, connection, TLS, redirects, body).
  std::chrono::milliseconds fetch_timeout{10'000};
};

// The image file's bytes that `url` names; MediaError when it names none that may be read.
std::vector<uint8_t> load_image_bytes(std::string_view url, const ImageSourceOptions& options = {});

// load_image_bytes, then decode_image.
RgbImage load_image(std::string_view url, const ImageSourceOptions& options = {}, const DecodeLimits& limits = {});

}  // namespace ds
