#include "coordinator/http/framing.h"

#include <cctype>

namespace ds::http_rules {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The comma-separated list elements of every field value, lower-cased; empty elements (",,")
// are allowed by the list syntax and skipped.
std::vector<std::string> codings(const std::vector<std::string_view>& values) {
  std::vector<std::string> out;
  for (std::string_view v : values) {
    size_t start = 0;
    while (start <= v.size()) {
      size_t comma = v.find(',', start);
      if (comma == std::string_view::npos) comma = v.size();
      const std::string_view item = trim(v.substr(start, comma - start));
      if (!item.empty()) out.push_back(lower(item));
      start = comma + 1;
    }
  }
  return out;
}

}  // namespace

std::optional<Rejection> check_request_framing(const std::vector<std::string_view>& transfer_encodings,
                                               bool has_content_length) {
  if (transfer_encodings.empty()) return std::nullopt;
  const std::vector<std::string> list = codings(transfer_encodings);
  if (list.empty() || list.back() != "chunked") {
    return Rejection{400, "Transfer-Encoding must end with 'chunked' in a request (RFC 9112 section 6.3)"};
  }
  for (size_t i = 0; i + 1 < list.size(); ++i) {
    if (list[i] == "chunked") return Rejection{400, "Transfer-Encoding applies 'chunked' more than once"};
  }
  if (list.size() > 1) {
    return Rejection{501, "Transfer-Encoding '" + list.front() + "' is not supported (only 'chunked')"};
  }
  if (has_content_length) {
    return Rejection{400, "A request may not carry both Transfer-Encoding and Content-Length"};
  }
  return std::nullopt;
}

bool is_json_media_type(std::string_view content_type) {
  const size_t semi = content_type.find(';');
  if (lower(trim(content_type.substr(0, semi))) != "application/json") return false;
  std::string_view rest = semi == std::string_view::npos ? std::string_view{} : content_type.substr(semi + 1);
  while (!trim(rest).empty()) {
    const size_t next = rest.find(';');
    const std::string_view param = trim(rest.substr(0, next));
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 1);
    if (param.empty()) continue;
    const size_t eq = param.find('=');
    if (eq == std::string_view::npos || lower(trim(param.substr(0, eq))) != "charset") return false;
    std::string_view value = trim(param.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    if (lower(value) != "utf-8") return false;
  }
  return true;
}

}  // namespace ds::http_rules
