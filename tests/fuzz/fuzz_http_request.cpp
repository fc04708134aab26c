// libFuzzer entry point for the HTTP request reader as a session runs it: Beast's request
// parser, then our framing rules (http_rules::check_request_framing) on each header, request
// after request on one connection. Invariants checked, besides "no crash": a request whose
// framing we accept is delimited unambiguously (Transfer-Encoding present => Beast decodes
// chunked; otherwise the body is exactly Content-Length bytes), and the media-type check never
// accepts a type that is not application/json.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/http/framing.h"

namespace http = boost::beast::http;

namespace {

// One request from data[0..size); returns the bytes it used, or 0 when the connection would
// be closed (error, rejection, or input ended mid-request).
size_t one_request(const uint8_t* data, size_t size) {
  http::request_parser<http::string_body> parser;
  parser.body_limit(1 << 16);
  parser.header_limit(8192);
  size_t used = 0;
  bool framing_checked = false;
  while (!parser.is_done()) {
    boost::beast::error_code ec;
    const size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    used += n;
    // All the remaining input is offered each time: needing more means it ended mid-request.
    if (ec == http::error::need_more) {
      if (n == 0 || used >= size) return 0;
      continue;
    }
    if (ec) return 0;
    if (parser.is_header_done() && !framing_checked) {
      framing_checked = true;
      const auto& h = parser.get();
      std::vector<std::string_view> te;
      for (auto [it, end] = h.equal_range(http::field::transfer_encoding); it != end; ++it) {
        te.emplace_back(it->value().data(), it->value().size());
      }
      const bool has_length = h.find(http::field::content_length) != h.end();
      if (ds::http_rules::check_request_framing(te, has_length)) return 0;  // reply 4xx/5xx and close
      if (!te.empty() && !parser.chunked()) std::abort();                   // accepted but not delimited by chunks
      const auto ct = h[http::field::content_type];
      if (ds::http_rules::is_json_media_type({ct.data(), ct.size()}) &&
          !boost::beast::iequals(ct.substr(0, 16), "application/json")) {
        std::abort();
      }
    }
    if (n == 0 && !parser.is_done()) return 0;
  }
  const auto& req = parser.get();
  if (!parser.chunked() && parser.content_length() && req.body().size() != *parser.content_length()) std::abort();
  return used;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t at = 0;
  for (int requests = 0; requests < 8 && at < size; ++requests) {
    const size_t used = one_request(data + at, size - at);
    if (used == 0) break;
    at += used;
  }
  return 0;
}
