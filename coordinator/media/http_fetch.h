// Downloading a remote image (issue 31): an http:// or https:// image URL to the file's bytes,
// under the operator's policy. Off unless the operator lists hosts (--allowed-media-domains).
//
// Every download, each refusal a MediaError fit for a 400:
// - the host must match the allow-list (remote_url.h says how entries match);
// - a DNS name is resolved once, and refused when ANY of its addresses is not public
//   (address_policy.h); the connection goes only to those vetted addresses, never through a
//   second lookup, so a name cannot be re-pointed at a private address between check and use
//   (DNS rebinding). An IP literal URL host passed the allow-list only as an IP entry, which the
//   operator trusts: it is connected to as it is, private or not;
// - https verifies the server's certificate against the system's trust store (the default
//   verify paths: ca-certificates) and the URL's host (DNS name or IP address), sends the host as
//   SNI (names only), and needs TLS 1.2 or later. Nothing turns verification off;
// - at most 3 redirects (301, 302, 303, 307, 308), each to the same host (any port), over the
//   same scheme or from http up to https; each hop is checked and resolved again;
// - a status other than 2xx is refused (with the status); a Content-Type, when sent, must be
//   image/* or application/octet-stream; a Content-Encoding other than identity is refused;
// - the body may hold at most max_bytes: a larger Content-Length is refused before the body is
//   read, and a body (chunked, or up to the end of the connection) growing past it is aborted;
// - one deadline covers the whole download: every lookup, connection, TLS handshake, redirect
//   and read. A DNS lookup cannot be cancelled: one still running at the deadline finishes on
//   its own thread and its result is dropped.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

struct HttpFetchOptions {
  // The hosts images may come from (remote_url.h); empty: every remote URL is refused.
  std::vector<std::string> allowed_domains{};
  // The whole download must finish within this.
  std::chrono::milliseconds timeout{10'000};
  // The most bytes the image may hold.
  size_t max_bytes = size_t{20} << 20;
  // PEM certificates trusted in addition to the system's (tests: a local TLS server); there is
  // no serve flag for it.
  std::string extra_ca_pem{};
};

// The bytes of the image `url` (http:// or https://) names; MediaError when the policy above
// refuses it or the download fails.
std::vector<uint8_t> fetch_remote_image(std::string_view url, const HttpFetchOptions& options);

}  // namespace ds
