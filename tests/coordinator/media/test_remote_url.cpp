// The remote-image policy without a network: the public-address classifier
// (coordinator/media/address_policy.h), allow-list entries and matching, URL parsing and
// redirect targets (coordinator/media/remote_url.h).
#include <gtest/gtest.h>

#include <boost/asio/ip/address.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "coordinator/media/address_policy.h"
#include "coordinator/media/image_decode.h"  // MediaError
#include "coordinator/media/remote_url.h"

namespace ds {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The classifier's verdict on a literal: "" when public.
std::string kind_of(const std::string& literal) {
  return non_public_address_kind(boost::asio::ip::make_address(literal)).value_or("");
}

TEST(AddressPolicy, Ipv4RangesAreNotPublicAndTheirNeighboursAre) {
  const std::vector<std::pair<std::string, std::string>> blocked = {
      {"0.0.0.0", "unspecified"},       {"0.1.2.3", "this network"},        {"10.0.0.0", "private"},
      {"10.255.255.255", "private"},    {"100.64.0.0", "carrier-grade"},    {"100.127.255.255", "carrier-grade"},
      {"127.0.0.1", "loopback"},        {"127.255.255.254", "loopback"},    {"169.254.169.254", "link-local"},
      {"172.16.0.0", "private"},        {"172.31.255.255", "private"},      {"192.0.0.8", "IETF"},
      {"192.0.2.1", "documentation"},   {"192.168.0.1", "private"},         {"192.168.255.255", "private"},
      {"198.18.0.1", "benchmarking"},   {"198.19.255.255", "benchmarking"}, {"198.51.100.7", "documentation"},
      {"203.0.113.9", "documentation"}, {"224.0.0.1", "multicast"},         {"239.255.255.255", "multicast"},
      {"240.0.0.1", "reserved"},        {"255.255.255.255", "reserved"},
  };
  for (const auto& [address, kind] : blocked) EXPECT_TRUE(contains(kind_of(address), kind)) << address;
  for (const std::string address :
       {"1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255",
        "128.0.0.0", "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "192.167.255.255", "192.169.0.0",
        "198.17.255.255", "198.20.0.0", "223.255.255.255"}) {
    EXPECT_EQ(kind_of(address), "") << address;
  }
}

TEST(AddressPolicy, Ipv6RangesAreNotPublicAndTheirNeighboursAre) {
  const std::vector<std::pair<std::string, std::string>> blocked = {
      {"::", "unspecified"},        {"::1", "loopback"},
      {"::2", "reserved"},          {"::7f00:1", "reserved"},  // IPv4-compatible 127.0.0.1
      {"fc00::1", "unique local"},  {"fdff:ffff::1", "unique local"},
      {"fe80::1", "link-local"},    {"febf::1", "link-local"},
      {"fec0::1", "site-local"},    {"ff02::1", "multicast"},
      {"ff0e::1", "multicast"},     {"100::1", "discard"},
      {"2001::1", "IETF"},  // Teredo
      {"2001:1ff::1", "IETF"},      {"2001:db8::1", "documentation"},
      {"3fff::1", "documentation"}, {"64:ff9b:1::1", "local-use NAT64"},
  };
  for (const auto& [address, kind] : blocked) EXPECT_TRUE(contains(kind_of(address), kind)) << address;
  for (const std::string address :
       {"2606:4700:4700::1111", "2001:4860:4860::8888", "2001:200::1", "2a00:1450::1", "fbff::1", "fe00::1"}) {
    EXPECT_EQ(kind_of(address), "") << address;
  }
}

// IPv4-mapped, NAT64 and 6to4 addresses reach the IPv4 address they carry: judged by it.
TEST(AddressPolicy, Ipv6FormsOfIpv4AreJudgedByTheirIpv4Address) {
  EXPECT_TRUE(contains(kind_of("::ffff:127.0.0.1"), "loopback")) << kind_of("::ffff:127.0.0.1");
  EXPECT_TRUE(contains(kind_of("::ffff:127.0.0.1"), "in IPv6 form"));
  EXPECT_TRUE(contains(kind_of("::ffff:10.1.2.3"), "private"));
  EXPECT_TRUE(contains(kind_of("::ffff:169.254.169.254"), "link-local"));
  EXPECT_TRUE(contains(kind_of("::ffff:100.64.0.1"), "carrier-grade"));
  EXPECT_TRUE(contains(kind_of("::ffff:0.0.0.0"), "unspecified"));
  EXPECT_TRUE(contains(kind_of("64:ff9b::a00:1"), "private"));    // NAT64 of 10.0.0.1
  EXPECT_TRUE(contains(kind_of("2002:c0a8:101::1"), "private"));  // 6to4 of 192.168.1.1
  EXPECT_TRUE(contains(kind_of("2002:7f00:1::1"), "loopback"));   // 6to4 of 127.0.0.1
  EXPECT_EQ(kind_of("::ffff:8.8.8.8"), "");
  EXPECT_EQ(kind_of("64:ff9b::808:808"), "");
  EXPECT_EQ(kind_of("2002:808:808::1"), "");
}

std::string url_error(const std::string& url) {
  try {
    parse_remote_url(url);
  } catch (const MediaError& e) {
    return e.what();
  }
  return "";
}

TEST(RemoteUrl, ParsesHostPortAndTarget) {
  RemoteUrl u = parse_remote_url("HTTPS://Images.Example.COM/a/b.png?x=1#frag");
  EXPECT_TRUE(u.https);
  EXPECT_EQ(u.host, "images.example.com");
  EXPECT_FALSE(u.host_is_ip);
  EXPECT_EQ(u.port, 443);
  EXPECT_EQ(u.target, "/a/b.png?x=1");
  EXPECT_EQ(host_header(u), "images.example.com");

  u = parse_remote_url("http://example.com");
  EXPECT_EQ(u.port, 80);
  EXPECT_EQ(u.target, "/");
  EXPECT_EQ(parse_remote_url("http://example.com?q").target, "/?q");

  u = parse_remote_url("http://127.0.0.1:8080/x.png");
  EXPECT_TRUE(u.host_is_ip);
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 8080);
  EXPECT_EQ(host_header(u), "127.0.0.1:8080");

  u = parse_remote_url("https://[0:0:0:0:0:0:0:1]:8443/");
  EXPECT_TRUE(u.host_is_ip);
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(host_header(u), "[::1]:8443");
}

TEST(RemoteUrl, RefusesUserInfoBadPortsAndMissingHosts) {
  EXPECT_TRUE(contains(url_error("http://user:pass@example.com/a.png"), "user info"));
  EXPECT_TRUE(contains(url_error("http://user@example.com/a.png"), "user info"));
  EXPECT_TRUE(contains(url_error("http://example.com:0/"), "outside 1..65535"));
  EXPECT_TRUE(contains(url_error("http://example.com:65536/"), "outside 1..65535"));
  EXPECT_TRUE(contains(url_error("http://example.com:99999999999999999999/"), "outside 1..65535"));
  EXPECT_TRUE(contains(url_error("http://example.com:80a/"), "not a number"));
  EXPECT_TRUE(contains(url_error("http://example.com:-1/"), "not a number"));
  EXPECT_TRUE(contains(url_error("http://example.com:/"), "empty port"));
  EXPECT_TRUE(contains(url_error("http:///a.png"), "no host"));
  EXPECT_TRUE(contains(url_error("http://:80/a.png"), "no host"));
  EXPECT_TRUE(contains(url_error("http://"), "no host"));
  EXPECT_TRUE(contains(url_error("http:/example.com/a.png"), "not of the form"));
}

TEST(RemoteUrl, RefusesHostsAndPathsThatAreNotPlainAscii) {
  EXPECT_TRUE(contains(url_error("http://exa mple.com/"), "not a DNS name"));
  EXPECT_TRUE(contains(url_error("http://example..com/"), "not a DNS name"));
  EXPECT_TRUE(contains(url_error("http://bücher.de/"), "punycode"));
  EXPECT_TRUE(contains(url_error("http://exa%6dple.com/"), "'%'"));
  EXPECT_TRUE(contains(url_error("http://[fe80::1%25eth0]/"), "'%'"));
  EXPECT_TRUE(contains(url_error("http://[::1/"), "closing ']'"));
  EXPECT_TRUE(contains(url_error("http://[not-v6]/"), "not an IPv6 address"));
  EXPECT_TRUE(contains(url_error("http://[::1]x/"), "text after"));
  EXPECT_TRUE(contains(url_error("http://a.com/a b.png"), "%-encode"));
  EXPECT_TRUE(contains(url_error("http://a.com/a\r\nX-Injected: 1"), "%-encode"));
  EXPECT_TRUE(contains(url_error("ftp://a.com/x"), "not an http:// or https:// URL"));
}

TEST(RemoteUrl, RedirectTargetsResolveAgainstTheCurrentUrl) {
  const RemoteUrl from = parse_remote_url("http://example.com:8080/dir/page.png?x=1");
  EXPECT_EQ(redirect_target(from, "/other.png").target, "/other.png");
  EXPECT_EQ(redirect_target(from, "/other.png").port, 8080);
  EXPECT_EQ(redirect_target(from, "next.png").target, "/dir/next.png");
  EXPECT_EQ(redirect_target(from, "?y=2").target, "/dir/page.png?y=2");
  const RemoteUrl absolute = redirect_target(from, "https://cdn.example.com/i.png");
  EXPECT_TRUE(absolute.https);
  EXPECT_EQ(absolute.host, "cdn.example.com");
  EXPECT_EQ(absolute.port, 443);
  const RemoteUrl scheme_relative = redirect_target(from, "//example.org/i.png");
  EXPECT_FALSE(scheme_relative.https);
  EXPECT_EQ(scheme_relative.host, "example.org");
  try {
    redirect_target(from, "file:///etc/passwd");
    ADD_FAILURE() << "a file: redirect was accepted";
  } catch (const MediaError& e) {
    EXPECT_TRUE(contains(e.what(), "not an http:// or https:// URL")) << e.what();
  }
  EXPECT_THROW(redirect_target(from, ""), MediaError);
}

std::string entry_error(const std::string& entry) {
  try {
    normalize_media_domain(entry);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(MediaDomains, EntriesAreNormalizedOrRefusedWithTheReason) {
  EXPECT_EQ(normalize_media_domain(" Images.Example.COM "), "images.example.com");
  EXPECT_EQ(normalize_media_domain("*.Example.com"), "*.example.com");
  EXPECT_EQ(normalize_media_domain("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(normalize_media_domain("[0::1]"), "::1");
  EXPECT_EQ(normalize_media_domain("0:0::1"), "::1");
  EXPECT_TRUE(contains(entry_error(""), "empty"));
  EXPECT_TRUE(contains(entry_error("  "), "empty"));
  EXPECT_TRUE(contains(entry_error("https://example.com"), "is a URL"));
  EXPECT_TRUE(contains(entry_error("example.com/images"), "holds a path"));
  EXPECT_TRUE(contains(entry_error("example.com:8080"), "holds a port"));
  EXPECT_TRUE(contains(entry_error("user@example.com"), "user info"));
  EXPECT_TRUE(contains(entry_error("*"), "every host"));
  EXPECT_TRUE(contains(entry_error("img*.example.com"), "'*'"));
  EXPECT_TRUE(contains(entry_error("*.*.example.com"), "'*'"));
  EXPECT_TRUE(contains(entry_error("exa mple.com"), "not a host name"));
  EXPECT_TRUE(contains(entry_error("[example.com]"), "not an IPv6 address"));
}

bool allowed(const std::string& url, const std::vector<std::string>& list) {
  return media_host_allowed(parse_remote_url(url), list);
}

TEST(MediaDomains, ExactNamesWildcardsAndIpEntriesMatch) {
  const std::vector<std::string> list = {"Example.com", "*.cdn.net", "127.0.0.1", "[::1]"};
  EXPECT_TRUE(allowed("http://example.com/a.png", list));
  EXPECT_TRUE(allowed("https://EXAMPLE.com:8443/a.png", list));  // any port
  EXPECT_FALSE(allowed("http://www.example.com/a.png", list));   // an exact entry has no subdomains
  EXPECT_FALSE(allowed("http://notexample.com/a.png", list));
  EXPECT_FALSE(allowed("http://example.com.evil.org/a.png", list));
  EXPECT_TRUE(allowed("http://a.cdn.net/a.png", list));
  EXPECT_TRUE(allowed("http://a.b.cdn.net/a.png", list));
  EXPECT_FALSE(allowed("http://cdn.net/a.png", list));  // *.cdn.net: subdomains only
  EXPECT_FALSE(allowed("http://xcdn.net/a.png", list));
  EXPECT_TRUE(allowed("http://127.0.0.1:9/a.png", list));
  EXPECT_TRUE(allowed("http://[::1]/a.png", list));
  EXPECT_FALSE(allowed("http://127.0.0.2/a.png", list));
  EXPECT_FALSE(allowed("http://[::ffff:127.0.0.1]/a.png", list));  // not the listed literal
  EXPECT_FALSE(allowed("http://localhost/a.png", list));
  EXPECT_FALSE(allowed("http://example.com/a.png", {}));
  // A bad entry matches nothing, and does not stop the others from matching.
  EXPECT_TRUE(allowed("http://example.com/a.png", {"https://example.com", "example.com"}));
  EXPECT_FALSE(allowed("http://example.com/a.png", {"https://example.com"}));
}

// A name never matches an IP entry, nor an IP literal a name or wildcard entry.
TEST(MediaDomains, NamesAndIpLiteralsNeverMatchEachOther) {
  EXPECT_FALSE(allowed("http://127.0.0.1/a.png", {"*.0.0.1", "localhost"}));
  EXPECT_FALSE(allowed("http://localhost/a.png", {"127.0.0.1", "::1"}));
}

}  // namespace
}  // namespace ds
