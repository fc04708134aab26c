#include "coordinator/media/image_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>
#include <string>

#include "common/base64.h"
#include "coordinator/media/http_fetch.h"

namespace ds {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string limit_text(size_t max_bytes) {
  return "the image limit of " + std::to_string(max_bytes) + " bytes";
}

// The URL's scheme, lower-cased, when it starts with one (RFC 3986: a letter, then letters,
// digits, '+', '-', '.', then ':'). Base64 never holds a ':', so bare base64 has none.
std::optional<std::string> scheme_of(std::string_view url) {
  const size_t colon = url.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  if (!std::isalpha(static_cast<unsigned char>(url[0]))) return std::nullopt;
  for (size_t i = 1; i < colon; ++i) {
    const unsigned char c = static_cast<unsigned char>(url[i]);
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return std::nullopt;
  }
  return lower(url.substr(0, colon));
}

std::vector<uint8_t> decode_base64_image(std::string_view text, size_t max_bytes, const char* what) {
  // Cheap before decoding: base64 is 4/3 the size, and whitespace may add some more.
  if (text.size() / 2 > max_bytes) throw MediaError(std::string(what) + " exceeds " + limit_text(max_bytes));
  std::string why;
  std::optional<std::vector<uint8_t>> bytes = base64_decode(text, max_bytes, &why);
  if (!bytes) {
    if (why.starts_with("the decoded data exceeds")) {
      throw MediaError(std::string(what) + " exceeds " + limit_text(max_bytes));
    }
    throw MediaError(std::string(what) + " is not valid base64: " + why);
  }
  if (bytes->empty()) throw MediaError(std::string(what) + " is empty");
  return std::move(*bytes);
}

// data:[<mime>][;<param>]*;base64,<data>
std::vector<uint8_t> data_url_bytes(std::string_view url, size_t max_bytes) {
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) throw MediaError("the data: URL has no ',' before its data");
  const std::string header = lower(url.substr(5, comma - 5));
  const std::string mime = header.substr(0, header.find(';'));
  if (!header.ends_with(";base64")) {
    throw MediaError("only base64 data: URLs are supported (data:" + mime + ";base64,...)");
  }
  if (mime.empty()) throw MediaError("the data: URL names no MIME type; send data:image/<type>;base64,...");
  if (!mime.starts_with("image/") || mime.size() == 6) {
    throw MediaError("the data: URL's MIME type is '" + mime + "', not an image type (image/png, image/jpeg, ...)");
  }
  return decode_base64_image(url.substr(comma + 1), max_bytes, "the data: URL's image");
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decoded_path(std::string_view path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      out += path[i];
      continue;
    }
    const int hi = i + 2 < path.size() ? hex_digit(path[i + 1]) : -1;
    const int lo = i + 2 < path.size() ? hex_digit(path[i + 2]) : -1;
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) throw MediaError("the file:// URL has a bad %-escape");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

bool is_inside(const std::filesystem::path& root, const std::filesystem::path& path) {
  const auto mismatch = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  return mismatch.first == root.end();
}

std::vector<uint8_t> read_regular_file(const std::string& path, size_t max_bytes, const std::string& not_found) {
  // O_NOFOLLOW: the path was just resolved; a symlink put there since is not followed.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) throw MediaError(not_found);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw MediaError(not_found);
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw MediaError("the image file exceeds " + limit_text(max_bytes));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(got);
  if (bytes.empty()) throw MediaError("the image file is empty");
  return bytes;
}

// file:///<path> or file://localhost/<path>, resolved and kept inside the media root.
std::vector<uint8_t> file_url_bytes(std::string_view url, const ImageSourceOptions& options) {
  if (options.media_root.empty()) {
    throw MediaError("file:// image URLs are off on this server; send the image as a base64 data: URL");
  }
  std::string_view rest = url.substr(7);  // after "file://"
  if (!url.substr(0, 7).ends_with("//")) throw MediaError("a file URL must be file:///<absolute path>");
  if (lower(rest.substr(0, 10)) == "localhost/") rest.remove_prefix(9);
  if (!rest.starts_with('/')) throw MediaError("a file URL must be file:///<absolute path> (no host)");
  // One message whether the file is missing, unreadable or outside the root: a client learns
  // nothing of the file system outside it.
  const std::string not_found = "the file URL names no readable image file inside the server's media directory";
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::canonical(options.media_root, ec);
  if (ec) throw MediaError("the server's media directory is not readable");
  const std::filesystem::path path = std::filesystem::canonical(percent_decoded_path(rest), ec);
  if (ec || !is_inside(root, path)) throw MediaError(not_found);
  return read_regular_file(path.string(), options.max_image_bytes, not_found);
}

}  // namespace

std::vector<uint8_t> load_image_bytes(std::string_view url, const ImageSourceOptions& options) {
  if (url.empty()) throw MediaError("the image URL is empty");
  const std::optional<std::string> scheme = scheme_of(url);
  if (!scheme) {
    if (url.find(':') != std::string_view::npos) {
      throw MediaError("the image URL is neither a data: URL, an http(s):// or file:// URL nor base64");
    }
    return decode_base64_image(url, options.max_image_bytes, "the base64 image");
  }
  if (*scheme == "data") return data_url_bytes(url, options.max_image_bytes);
  if (*scheme == "file") return file_url_bytes(url, options);
  if (*scheme == "http" || *scheme == "https") {
    HttpFetchOptions fetch;
    fetch.allowed_domains = options.allowed_media_domains;
    fetch.timeout = options.fetch_timeout;
    fetch.max_bytes = options.max_image_bytes;
    return fetch_remote_image(url, fetch);
  }
  throw MediaError("unsupported image URL scheme '" + *scheme + ":'; send the image as a base64 data: URL");
}

RgbImage load_image(std::string_view url, const ImageSourceOptions& options, const DecodeLimits& limits) {
  return decode_image(load_image_bytes(url, options), limits);
}

}  // namespace ds
