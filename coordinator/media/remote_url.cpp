#include "coordinator/media/remote_url.h"

#include <boost/asio/ip/address.hpp>
#include <cctype>
#include <optional>
#include <stdexcept>

#include "coordinator/media/image_decode.h"  // MediaError

namespace ds {

namespace {

namespace ip = boost::asio::ip;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_url(const std::string& why) {
  throw MediaError("the image URL " + why);
}

uint16_t default_port(bool https) {
  return https ? 443 : 80;
}

// An IPv4 literal in dotted-quad form only (inet_pton's rule: no octal, hex or short forms).
std::optional<ip::address_v4> ipv4_literal(const std::string& s) {
  boost::system::error_code ec;
  const ip::address_v4 a = ip::make_address_v4(s, ec);
  if (ec) return std::nullopt;
  return a;
}

// Zone ids (fe80::1%eth0) are refused before this is called.
std::optional<ip::address_v6> ipv6_literal(const std::string& s) {
  boost::system::error_code ec;
  const ip::address_v6 a = ip::make_address_v6(s, ec);
  if (ec) return std::nullopt;
  return a;
}

bool is_label_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

// Dot-separated labels of 1..63 letters, digits, '-' or '_' (ASCII: punycode for other scripts).
bool valid_dns_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t label = 0;
  for (const char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
    } else if (!is_label_char(c) || ++label > 63) {
      return false;
    }
  }
  return label > 0;
}

uint16_t parse_port(std::string_view text) {
  if (text.empty()) bad_url("has an empty port");
  unsigned long value = 0;
  for (const char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c)))
      bad_url("has a port '" + std::string(text) + "' that is not a number");
    value = value * 10 + static_cast<unsigned long>(c - '0');
    if (value > 65535) break;
  }
  if (value < 1 || value > 65535) bad_url("has a port " + std::string(text) + " outside 1..65535");
  return static_cast<uint16_t>(value);
}

void set_host(std::string_view text, bool bracketed, RemoteUrl& out) {
  const std::string host = lower(text);
  if (host.empty()) bad_url("has no host");
  if (host.find('%') != std::string::npos) bad_url("has a '%' in its host (%-escapes and zone ids are not supported)");
  if (bracketed) {
    const std::optional<ip::address_v6> v6 = ipv6_literal(host);
    if (!v6) bad_url("has a host '[" + host + "]' that is not an IPv6 address");
    out.host = v6->to_string();
    out.host_is_ip = true;
  } else if (const std::optional<ip::address_v4> v4 = ipv4_literal(host)) {
    out.host = v4->to_string();
    out.host_is_ip = true;
  } else if (valid_dns_name(host)) {
    out.host = host;
  } else {
    bad_url("has a host '" + host +
            "' that is not a DNS name (ASCII letters, digits, '-', '_' and dots; punycode for "
            "other scripts) or an IP address");
  }
}

// host, host:port, [v6] or [v6]:port.
void parse_authority(std::string_view authority, RemoteUrl& out) {
  if (authority.find('@') != std::string_view::npos) {
    bad_url("carries user info (user:password@host), which is not accepted");
  }
  std::string_view host = authority;
  std::optional<std::string_view> port;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) bad_url("has an IPv6 host without its closing ']'");
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') bad_url("has text after its IPv6 host");
    if (!after.empty()) port = after.substr(1);
  } else if (const size_t colon = authority.find(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  set_host(host, authority.starts_with('['), out);
  out.port = port ? parse_port(*port) : default_port(out.https);
}

// The path and query as sent in the request line: the fragment dropped, "/" when empty.
std::string request_target(std::string_view tail) {
  tail = tail.substr(0, tail.find('#'));
  std::string target = tail.starts_with('/') ? std::string(tail) : "/" + std::string(tail);
  for (const char c : target) {
    // Anything else could end the request line or forge a header.
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7F) bad_url("has a space, control or non-ASCII character in its path (%-encode it)");
  }
  return target;
}

// The scheme `location` starts with (RFC 3986: a letter, then letters, digits, '+', '-', '.'),
// lower-cased; empty when it is a relative reference.
std::string scheme_of(std::string_view location) {
  const size_t colon = location.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > location.find_first_of("/?#")) return "";
  if (!std::isalpha(static_cast<unsigned char>(location[0]))) return "";
  for (const char c : location.substr(0, colon)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return "";
  }
  return lower(location.substr(0, colon));
}

RemoteUrl resolve_reference(const RemoteUrl& from, std::string_view location) {
  if (location.starts_with("//")) return parse_remote_url((from.https ? "https:" : "http:") + std::string(location));
  const std::string scheme = scheme_of(location);
  if (!scheme.empty()) {
    if (scheme != "http" && scheme != "https") bad_url("is not an http:// or https:// URL");
    return parse_remote_url(location);
  }
  RemoteUrl to = from;
  const std::string path = from.target.substr(0, from.target.find('?'));
  if (location.starts_with('/')) {
    to.target = request_target(location);
  } else if (location.starts_with('?')) {
    to.target = request_target(path + std::string(location));
  } else {
    // Relative to the current path's directory; dot segments are left to the server.
    to.target = request_target(path.substr(0, path.rfind('/') + 1) + std::string(location));
  }
  return to;
}

bool is_ip_entry(const std::string& entry) {
  return entry.find(':') != std::string::npos || ipv4_literal(entry).has_value();
}

bool host_matches(const RemoteUrl& url, const std::string& entry) {
  // A name never matches an IP entry, and an IP literal URL matches nothing else: the
  // private-address exemption of IP entries must not reach names (or names reach it).
  if (url.host_is_ip || is_ip_entry(entry)) return url.host_is_ip && url.host == entry;
  if (entry.starts_with("*.")) return url.host.size() > entry.size() - 1 && url.host.ends_with(entry.substr(1));
  return url.host == entry;
}

[[noreturn]] void bad_entry(const std::string& entry, const std::string& why) {
  throw std::invalid_argument("'" + entry + "' " + why);
}

}  // namespace

RemoteUrl parse_remote_url(std::string_view url) {
  RemoteUrl out;
  const size_t separator = url.find("://");
  if (separator == std::string_view::npos) bad_url("is not of the form http[s]://host[:port]/path");
  const std::string scheme = lower(url.substr(0, separator));
  if (scheme != "http" && scheme != "https") bad_url("is not an http:// or https:// URL");
  out.https = scheme == "https";
  const std::string_view rest = url.substr(separator + 3);
  const size_t authority_end = rest.find_first_of("/?#");
  parse_authority(rest.substr(0, authority_end), out);
  out.target = request_target(authority_end == std::string_view::npos ? "" : rest.substr(authority_end));
  return out;
}

RemoteUrl redirect_target(const RemoteUrl& from, std::string_view location) {
  location = trimmed(location);
  if (location.empty()) throw MediaError("the image server redirected without a Location");
  try {
    return resolve_reference(from, location);
  } catch (const MediaError& e) {
    throw MediaError("the image server redirected to '" + std::string(location) +
                     "', which is not followed: " + e.what());
  }
}

std::string host_header(const RemoteUrl& url) {
  std::string out = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  if (url.port != default_port(url.https)) out += ":" + std::to_string(url.port);
  return out;
}

std::string normalize_media_domain(std::string_view text) {
  const std::string entry = lower(trimmed(text));
  if (entry.empty()) throw std::invalid_argument("an entry is empty (two commas in a row, or one at an end)");
  if (entry.find("://") != std::string::npos) bad_entry(entry, "is a URL; give the host alone, as in example.com");
  if (entry.find_first_of("/?#") != std::string::npos) bad_entry(entry, "holds a path; give the host alone");
  if (entry.find('@') != std::string::npos) bad_entry(entry, "holds user info; give the host alone");
  if (entry.find('%') != std::string::npos) bad_entry(entry, "holds a '%' (%-escapes and zone ids are not supported)");
  if (entry.starts_with('[') && entry.ends_with(']')) {
    const std::optional<ip::address_v6> v6 = ipv6_literal(entry.substr(1, entry.size() - 2));
    if (!v6) bad_entry(entry, "is not an IPv6 address");
    return v6->to_string();
  }
  if (const std::optional<ip::address_v4> v4 = ipv4_literal(entry)) return v4->to_string();
  if (const std::optional<ip::address_v6> v6 = ipv6_literal(entry)) return v6->to_string();
  if (entry.find(':') != std::string::npos) {
    bad_entry(entry, "holds a port; an entry is a host alone, and the URL's port is used");
  }
  if (entry == "*") bad_entry(entry, "would allow every host; list the hosts (*.example.com: a domain's subdomains)");
  const std::string_view name = entry.starts_with("*.") ? std::string_view(entry).substr(2) : entry;
  if (name.find('*') != std::string_view::npos) bad_entry(entry, "has a '*' that is not a leading '*.'");
  if (!valid_dns_name(name)) {
    bad_entry(entry, "is not a host name (ASCII letters, digits, '-', '_' and dots between labels) or IP address");
  }
  return entry;
}

bool media_host_allowed(const RemoteUrl& url, const std::vector<std::string>& allowed) {
  for (const std::string& raw : allowed) {
    std::string entry;
    try {
      entry = normalize_media_domain(raw);
    } catch (const std::invalid_argument&) {
      continue;  // refused at start-up; a list built elsewhere gains nothing from it
    }
    if (host_matches(url, entry)) return true;
  }
  return false;
}

}  // namespace ds
