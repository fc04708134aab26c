// Remote image URLs (issue 31): parsing an http:// or https:// URL, following a redirect's
// Location, and the operator's list of hosts images may come from (--allowed-media-domains).
//
// URLs: http[s]://host[:port][/path][?query][#fragment]. The host is a DNS name (ASCII letters,
// digits, '-', '_', dots between non-empty labels; a name in another script must be sent in its
// punycode form), an IPv4 literal or a bracketed IPv6 literal; it is lower-cased. Refused: user
// info (user:pass@host), an empty or non-numeric port or one outside 1..65535, no host, and a
// path or query holding a space, a control or a non-ASCII byte (they must be %-encoded). The
// connection goes to the URL's port, or 80 / 443. The fragment is never sent.
//
// Allow-list entries (normalize_media_domain):
// - `example.com`: that host exactly (case-insensitive); not its subdomains.
// - `*.example.com`: any subdomain of example.com, at any depth (a.example.com, a.b.example.com),
//   but not example.com itself: list both to allow both.
// - an IP literal (`127.0.0.1`, `::1` or `[::1]`): URLs naming that address literally. The
//   operator trusts such an address explicitly, so it may be private or loopback (the public-
//   address rule, address_policy.h, is not applied to it). A name never matches an IP entry, and
//   an IP literal URL matches nothing but an IP entry: `localhost` resolves to 127.0.0.1 but is
//   judged as a name, so its loopback address is refused.
// An entry holds no scheme, port, path or user info; `*` alone is refused.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

struct RemoteUrl {
  bool https = false;
  std::string host;  // lower-case; an IPv6 literal without its brackets, in canonical form
  bool host_is_ip = false;
  uint16_t port = 0;   // the URL's, or the scheme's default
  std::string target;  // path and query, at least "/"; no fragment
};

// MediaError when `url` is not an http(s) URL of the form above.
RemoteUrl parse_remote_url(std::string_view url);

// The URL `location` (a redirect's Location header: absolute, //host/..., /path or a relative
// path) names, seen from `from`; MediaError when it is not an http(s) URL.
RemoteUrl redirect_target(const RemoteUrl& from, std::string_view location);

// "host", "host:port" when the port is not the scheme's default, "[v6]" for IPv6: the Host
// header, and how messages name the server.
std::string host_header(const RemoteUrl& url);

// An allow-list entry in the form media_host_allowed compares (lower-case; an IP literal in
// canonical form without brackets; `*.` kept); std::invalid_argument saying what is wrong.
std::string normalize_media_domain(std::string_view entry);

// Whether `url`'s host matches an entry of `allowed` (entries that do not normalize match none).
bool media_host_allowed(const RemoteUrl& url, const std::vector<std::string>& allowed);

}  // namespace ds
