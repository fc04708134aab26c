// Request framing and media-type rules of the front door, as pure functions over header
// values (no Beast), so the session, the unit tests and the fuzz target share one definition.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ds::http_rules {

struct Rejection {
  int status = 400;
  std::string message;
};

// RFC 9112 §6.1 / §6.3 for a request. `transfer_encodings` holds every Transfer-Encoding field
// value (a request may repeat the field); `has_content_length`: a Content-Length field exists.
// The only framing accepted with Transfer-Encoding is exactly one `chunked` and no
// Content-Length: a final coding other than `chunked` leaves the body length undefined (400),
// another coding before it is one we cannot decode (501), and both fields together is the
// classic smuggling shape (400). Every rejection must close the connection, since the bytes
// after the header cannot be attributed to this request or the next.
std::optional<Rejection> check_request_framing(const std::vector<std::string_view>& transfer_encodings,
                                               bool has_content_length);

// True for `application/json` with no parameter other than charset=utf-8 (any case, quoted or
// not). Bodies of POST routes are JSON; text/plain or form types are what a cross-origin
// "simple request" can send without a CORS preflight, so they must not be accepted.
bool is_json_media_type(std::string_view content_type);

}  // namespace ds::http_rules
