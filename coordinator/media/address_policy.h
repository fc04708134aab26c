// Which IP addresses a remote image may be downloaded from (issue 31): only public ones, so that
// an image URL cannot make the server reach its own machine or network (SSRF). The download
// (http_fetch.h) refuses a host when ANY address it resolves to is not public.
//
// Not public (each with the range the message names):
// - IPv4: 0.0.0.0/8 (unspecified, "this network"), 10/8, 172.16/12, 192.168/16 (private),
//   100.64/10 (carrier-grade NAT), 127/8 (loopback), 169.254/16 (link-local), 192.0.0/24 (IETF),
//   192.0.2/24, 198.51.100/24, 203.0.113/24 (documentation), 198.18/15 (benchmarking),
//   224/4 (multicast), 240/4 (reserved, 255.255.255.255 included).
// - IPv6: :: and ::1, the rest of ::/8 (IPv4-compatible and reserved), fc00::/7 (unique local),
//   fe80::/10 (link-local), fec0::/10 (site-local), ff00::/8 (multicast), 100::/64 (discard),
//   2001::/23 (IETF, Teredo included), 2001:db8::/32 and 3fff::/20 (documentation),
//   64:ff9b:1::/48 (local NAT64).
// - IPv6 forms that carry an IPv4 address are judged by that address: IPv4-mapped ::ffff:0:0/96,
//   NAT64 64:ff9b::/96 and 6to4 2002::/16.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <optional>
#include <string>

namespace ds {

// Why `address` is not public ("a loopback address (127.0.0.0/8)"), or nullopt when it is.
std::optional<std::string> non_public_address_kind(const boost::asio::ip::address& address);

}  // namespace ds
