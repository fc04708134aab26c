#include "coordinator/media/address_policy.h"

#include <array>
#include <cstdint>
#include <vector>

namespace ds {

namespace {

namespace ip = boost::asio::ip;

struct V4Block {
  uint32_t network;
  int prefix_bits;
  const char* kind;
};

// Sorted by address; 0.0.0.0 itself is named apart (unspecified) before this table is read.
constexpr std::array<V4Block, 14> kV4Blocks = {{
    {0x00000000, 8, "a \"this network\" address (0.0.0.0/8)"},
    {0x0A000000, 8, "a private address (10.0.0.0/8)"},
    {0x64400000, 10, "a carrier-grade NAT address (100.64.0.0/10)"},
    {0x7F000000, 8, "a loopback address (127.0.0.0/8)"},
    {0xA9FE0000, 16, "a link-local address (169.254.0.0/16)"},
    {0xAC100000, 12, "a private address (172.16.0.0/12)"},
    {0xC0000000, 24, "an IETF protocol address (192.0.0.0/24)"},
    {0xC0000200, 24, "a documentation address (192.0.2.0/24)"},
    {0xC0A80000, 16, "a private address (192.168.0.0/16)"},
    {0xC6120000, 15, "a benchmarking address (198.18.0.0/15)"},
    {0xC6336400, 24, "a documentation address (198.51.100.0/24)"},
    {0xCB007100, 24, "a documentation address (203.0.113.0/24)"},
    {0xE0000000, 4, "a multicast address (224.0.0.0/4)"},
    {0xF0000000, 4, "a reserved address (240.0.0.0/4)"},
}};

std::optional<std::string> v4_kind(const ip::address_v4& address) {
  const uint32_t a = address.to_uint();
  if (a == 0) return "the unspecified address";
  for (const V4Block& b : kV4Blocks) {
    const uint32_t mask = ~uint32_t{0} << (32 - b.prefix_bits);
    if ((a & mask) == b.network) return b.kind;
  }
  return std::nullopt;
}

using V6Bytes = ip::address_v6::bytes_type;

struct V6Block {
  V6Bytes network;
  int prefix_bits;
  const char* kind;
};

bool in_prefix(const V6Bytes& a, const V6Block& b) {
  for (int bit = 0; bit < b.prefix_bits; bit += 8) {
    const int n = b.prefix_bits - bit < 8 ? b.prefix_bits - bit : 8;
    const auto mask = static_cast<uint8_t>(0xFF << (8 - n));
    if ((a[static_cast<size_t>(bit / 8)] & mask) != (b.network[static_cast<size_t>(bit / 8)] & mask)) return false;
  }
  return true;
}

V6Block v6_block(const char* network, int prefix_bits, const char* kind) {
  return {ip::make_address_v6(network).to_bytes(), prefix_bits, kind};
}

// The ranges that are never public whatever follows, the first match naming the range; the
// IPv4-carrying forms are handled apart, before.
const std::vector<V6Block>& v6_blocks() {
  static const std::vector<V6Block> blocks = {
      v6_block("64:ff9b:1::", 48, "a local-use NAT64 address (64:ff9b:1::/48)"),
      v6_block("100::", 64, "a discard-only address (100::/64)"),
      v6_block("2001:db8::", 32, "a documentation address (2001:db8::/32)"),
      v6_block("2001::", 23, "an IETF protocol address (2001::/23, Teredo included)"),
      v6_block("3fff::", 20, "a documentation address (3fff::/20)"),
      v6_block("fc00::", 7, "a unique local address (fc00::/7)"),
      v6_block("fe80::", 10, "a link-local address (fe80::/10)"),
      v6_block("fec0::", 10, "a site-local address (fec0::/10)"),
      v6_block("ff00::", 8, "a multicast address (ff00::/8)"),
      // Last: 64:ff9b:1::/48 lies inside it and is named more precisely above.
      v6_block("::", 8, "a reserved address (::/8, IPv4-compatible included)"),
  };
  return blocks;
}

ip::address_v4 v4_at(const V6Bytes& a, size_t offset) {
  return ip::address_v4(ip::address_v4::bytes_type{a[offset], a[offset + 1], a[offset + 2], a[offset + 3]});
}

// The IPv4 address an IPv6 address stands for, where connecting to it reaches that address:
// IPv4-mapped (the kernel connects over IPv4), NAT64 (a translator does) and 6to4 (a relay does).
std::optional<ip::address_v4> embedded_v4(const ip::address_v6& address) {
  if (address.is_v4_mapped()) return v4_at(address.to_bytes(), 12);
  const V6Bytes a = address.to_bytes();
  static const V6Block nat64 = v6_block("64:ff9b::", 96, "");
  static const V6Block six_to_four = v6_block("2002::", 16, "");
  if (in_prefix(a, nat64)) return v4_at(a, 12);
  if (in_prefix(a, six_to_four)) return v4_at(a, 2);
  return std::nullopt;
}

std::optional<std::string> v6_kind(const ip::address_v6& address) {
  if (address.is_unspecified()) return "the unspecified address (::)";
  if (address.is_loopback()) return "a loopback address (::1)";
  if (const std::optional<ip::address_v4> v4 = embedded_v4(address)) {
    const std::optional<std::string> kind = v4_kind(*v4);
    if (kind) return *kind + " in IPv6 form";
    return std::nullopt;
  }
  const V6Bytes a = address.to_bytes();
  for (const V6Block& b : v6_blocks()) {
    if (in_prefix(a, b)) return b.kind;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> non_public_address_kind(const boost::asio::ip::address& address) {
  return address.is_v4() ? v4_kind(address.to_v4()) : v6_kind(address.to_v6());
}

}  // namespace ds
