// Remote image downloads (coordinator/media/http_fetch.h) end to end against a server in the
// test on 127.0.0.1, allowed as the IP entry "127.0.0.1": answers, refusals, the size cap, the
// deadline, redirects, the allow-list, and https against local TLS servers with certificates
// made here (no network beyond loopback is needed).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/media/http_fetch.h"
#include "coordinator/media/image_decode.h"
#include "coordinator/media/image_source.h"
#include "tests/coordinator/media/image_encoders.h"
#include "tests/coordinator/media/local_http_server.h"

namespace ds {
namespace {

using std::chrono::milliseconds;
using test::LocalHttpServer;
using test::ServerConnection;
using test::ServerRequest;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A 4x3 RGB image whose pixel (x, y) is (10x, 20y, 7).
test::PngSpec tiny_spec() {
  test::PngSpec spec;
  spec.width = 4;
  spec.height = 3;
  for (uint32_t y = 0; y < spec.height; ++y) {
    for (uint32_t x = 0; x < spec.width; ++x) {
      spec.rows.insert(spec.rows.end(), {static_cast<uint8_t>(10 * x), static_cast<uint8_t>(20 * y), 7});
    }
  }
  return spec;
}

const std::string& tiny_png() {
  static const std::string png = [] {
    const std::vector<uint8_t> bytes = test::encode_png(tiny_spec());
    return std::string(bytes.begin(), bytes.end());
  }();
  return png;
}

std::vector<uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

// Sends `piece` until the client goes away (or `limit` bytes went out).
void send_until_closed(ServerConnection& c, const std::string& piece, size_t limit) {
  for (size_t sent = 0; sent < limit && c.send(piece); sent += piece.size()) {
  }
}

class Downloads : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<LocalHttpServer>([this](const ServerRequest& r, ServerConnection& c) { answer(r, c); });
    options_.allowed_domains = {"127.0.0.1"};
    options_.timeout = milliseconds(1000);
    options_.max_bytes = 8192;
  }

  // Every case the tests ask for, by path.
  void answer(const ServerRequest& r, ServerConnection& c) {
    const std::string& t = r.target;
    const std::string png = tiny_png();
    if (t == "/image.png" || t == "/dir/image.png")
      c.send(test::http_answer("200 OK", "Content-Type: image/png\r\n", png));
    if (t == "/octet") c.send(test::http_answer("200 OK", "Content-Type: Application/Octet-Stream\r\n", png));
    if (t == "/untyped") c.send(test::http_answer("200 OK", "", png));
    if (t == "/missing") c.send(test::http_answer("404 Not Found", "Content-Type: text/html\r\n", "<h1>no</h1>"));
    if (t == "/html") c.send(test::http_answer("200 OK", "Content-Type: text/html; charset=utf-8\r\n", "<h1>hi</h1>"));
    if (t == "/gzip") c.send(test::http_answer("200 OK", "Content-Type: image/png\r\nContent-Encoding: gzip\r\n", png));
    if (t == "/empty") c.send(test::http_answer("200 OK", "Content-Type: image/png\r\n", ""));
    if (t == "/huge") {
      // The header promises 100 MB, then nothing comes: only a refusal on the header ends this fast.
      c.send("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 100000000\r\n\r\n");
      c.pause(milliseconds(5000));
    }
    if (t == "/chunked-forever") {
      c.send("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n");
      send_until_closed(c, "400\r\n" + std::string(1024, 'x') + "\r\n", size_t{64} << 20);
    }
    if (t == "/eof-forever") {
      c.send("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nConnection: close\r\n\r\n");
      send_until_closed(c, std::string(1024, 'x'), size_t{64} << 20);
    }
    if (t == "/slow") {
      if (c.pause(milliseconds(5000))) c.send(test::http_answer("200 OK", "Content-Type: image/png\r\n", png));
    }
    if (t == "/trickle") {
      // Every byte comes well within any idle timeout; only a deadline on the whole download ends it.
      c.send("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 4000\r\n\r\n");
      for (int i = 0; i < 4000 && c.pause(milliseconds(20)) && c.send("x"); ++i) {
      }
    }
    if (t == "/redirect") c.send(test::http_answer("302 Found", "Location: /image.png\r\n", ""));
    if (t == "/redirect-absolute") {
      c.send(test::http_answer("301 Moved Permanently", "Location: " + server_->url("/image.png") + "\r\n", ""));
    }
    if (t == "/dir/redirect-relative")
      c.send(test::http_answer("307 Temporary Redirect", "Location: image.png\r\n", ""));
    if (t == "/redirect-other-host") {
      c.send(test::http_answer("302 Found", "Location: " + server_->url("/image.png", "localhost") + "\r\n", ""));
    }
    if (t == "/redirect-no-location") c.send(test::http_answer("302 Found", "", ""));
    if (t.starts_with("/hop")) {  // /hopN redirects N times before the image
      const int n = std::stoi(t.substr(4));
      c.send(test::http_answer("302 Found",
                               "Location: " + (n > 1 ? "/hop" + std::to_string(n - 1) : "/image.png") + "\r\n", ""));
    }
    if (t.empty()) c.send("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    // "/close": no answer at all.
  }

  std::string error(const std::string& url) const {
    try {
      fetch_remote_image(url, options_);
    } catch (const MediaError& e) {
      return e.what();
    }
    return "";
  }

  std::unique_ptr<LocalHttpServer> server_;
  HttpFetchOptions options_;
};

TEST_F(Downloads, APngIsDownloadedAndDecodes) {
  ImageSourceOptions source;
  source.allowed_media_domains = {"127.0.0.1"};
  source.fetch_timeout = milliseconds(1000);
  const RgbImage image = load_image(server_->url("/image.png"), source);
  ASSERT_EQ(image.width, 4u);
  ASSERT_EQ(image.height, 3u);
  EXPECT_EQ(image.rgb, tiny_spec().rows);
  EXPECT_EQ(server_->requests(), 1);
}

TEST_F(Downloads, OctetStreamAndUntypedAnswersAreAccepted) {
  EXPECT_EQ(fetch_remote_image(server_->url("/octet"), options_), bytes_of(tiny_png()));
  EXPECT_EQ(fetch_remote_image(server_->url("/untyped"), options_), bytes_of(tiny_png()));
}

TEST_F(Downloads, AnswersThatAreNotImagesAreRefused) {
  const std::string missing = error(server_->url("/missing"));
  EXPECT_TRUE(contains(missing, "answered 404 Not Found")) << missing;
  const std::string html = error(server_->url("/html"));
  EXPECT_TRUE(contains(html, "Content-Type 'text/html', not an image")) << html;
  EXPECT_TRUE(contains(error(server_->url("/gzip")), "Content-Encoding 'gzip'"));
  EXPECT_TRUE(contains(error(server_->url("/empty")), "sent an empty image"));
  EXPECT_TRUE(contains(error(server_->url("/redirect-no-location")), "answered 302"));
  const std::string closed = error(server_->url("/close"));
  EXPECT_TRUE(contains(closed, "reading the answer of the image server 127.0.0.1:")) << closed;
}

TEST_F(Downloads, AContentLengthOverTheCapIsRefusedBeforeTheBody) {
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error(server_->url("/huge"));
  EXPECT_TRUE(contains(e, "100000000 bytes (Content-Length), over the image limit of 8192 bytes")) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(500));
}

TEST_F(Downloads, BodiesGrowingPastTheCapAreAborted) {
  const std::string chunked = error(server_->url("/chunked-forever"));
  EXPECT_TRUE(contains(chunked, "exceeds the image limit of 8192 bytes")) << chunked;
  const std::string eof = error(server_->url("/eof-forever"));
  EXPECT_TRUE(contains(eof, "exceeds the image limit of 8192 bytes")) << eof;
}

TEST_F(Downloads, ASlowServerHitsTheDeadline) {
  options_.timeout = milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error(server_->url("/slow"));
  EXPECT_TRUE(contains(e, "took longer than this server's limit of 0.3 s")) << e;
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(250));
  EXPECT_LT(took, milliseconds(1500));
}

// The deadline bounds the whole download, not each read.
TEST_F(Downloads, ATrickleHitsTheDeadlineOfTheWholeDownload) {
  options_.timeout = milliseconds(400);
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error(server_->url("/trickle"));
  EXPECT_TRUE(contains(e, "took longer")) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500));
}

TEST_F(Downloads, RedirectsWithinTheHostAreFollowed) {
  EXPECT_EQ(fetch_remote_image(server_->url("/redirect"), options_), bytes_of(tiny_png()));
  EXPECT_EQ(fetch_remote_image(server_->url("/redirect-absolute"), options_), bytes_of(tiny_png()));
  EXPECT_EQ(fetch_remote_image(server_->url("/dir/redirect-relative"), options_), bytes_of(tiny_png()));
  const int before = server_->requests();
  EXPECT_EQ(fetch_remote_image(server_->url("/hop3"), options_), bytes_of(tiny_png()));  // 3 redirects: the most
  EXPECT_EQ(server_->requests() - before, 4);
}

TEST_F(Downloads, MoreThanThreeRedirectsAreRefused) {
  const std::string e = error(server_->url("/hop4"));
  EXPECT_TRUE(contains(e, "redirects more than 3 times")) << e;
}

// localhost is allowed by name here, but it is another host than 127.0.0.1.
TEST_F(Downloads, ARedirectToAnotherHostIsRefused) {
  options_.allowed_domains = {"127.0.0.1", "localhost"};
  const int before = server_->requests();
  const std::string e = error(server_->url("/redirect-other-host"));
  EXPECT_TRUE(contains(e, "redirects to another host ('localhost')")) << e;
  EXPECT_EQ(server_->requests() - before, 1);
}

TEST_F(Downloads, HostsOffTheListAreRefusedBeforeAnyLookup) {
  const std::string e = error("http://images.example.com/cat.png");
  EXPECT_TRUE(contains(e, "'images.example.com' is not in this server's allowed media domains")) << e;
  options_.allowed_domains.clear();
  const std::string off = error(server_->url("/image.png"));
  EXPECT_TRUE(contains(off, "are off on this server") && contains(off, "--allowed-media-domains")) << off;
  ImageSourceOptions source;  // the default: off
  try {
    load_image_bytes(server_->url("/image.png"), source);
    ADD_FAILURE() << "a remote URL was fetched by default";
  } catch (const MediaError& m) {
    EXPECT_TRUE(contains(m.what(), "are off on this server")) << m.what();
  }
  EXPECT_EQ(server_->requests(), 0);
}

// Listed by name, localhost is still refused: it resolves to loopback, and only IP entries are trusted.
TEST_F(Downloads, ANameResolvingToLoopbackIsRefused) {
  options_.allowed_domains = {"localhost", "127.0.0.1"};
  const std::string e = error(server_->url("/image.png", "localhost"));
  EXPECT_TRUE(contains(e, "the image host 'localhost' resolves to") && contains(e, "a loopback address")) << e;
  EXPECT_TRUE(contains(e, "only from public addresses")) << e;
  EXPECT_EQ(server_->requests(), 0);
}

TEST_F(Downloads, AClosedPortIsRefusedClearly) {
  const std::string e = error("http://127.0.0.1:" + std::to_string(test::unused_port()) + "/image.png");
  EXPECT_TRUE(contains(e, "cannot connect to the image server 127.0.0.1:")) << e;
}

// ---- https ----------------------------------------------------------------------------------

// TLS to a port that speaks plain HTTP fails the handshake, with a message.
TEST_F(Downloads, TlsToAPlainHttpPortFailsCleanly) {
  const std::string e = error("https://127.0.0.1:" + std::to_string(server_->port()) + "/image.png");
  EXPECT_TRUE(contains(e, "the TLS handshake with the image server 127.0.0.1:")) << e;
}

class TlsDownloads : public ::testing::Test {
 protected:
  static void answer(const ServerRequest& r, ServerConnection& c, const std::string& plain_url) {
    if (r.target == "/image.png") c.send(test::http_answer("200 OK", "Content-Type: image/png\r\n", tiny_png()));
    if (r.target == "/downgrade") c.send(test::http_answer("302 Found", "Location: " + plain_url + "\r\n", ""));
  }

  void serve(const test::TlsIdentity& identity) {
    identity_ = identity;
    server_ = std::make_unique<LocalHttpServer>(
        [](const ServerRequest& r, ServerConnection& c) { answer(r, c, "http://127.0.0.1:9/image.png"); }, &identity_);
  }

  std::string error(const std::string& url) const {
    try {
      fetch_remote_image(url, options_);
    } catch (const MediaError& e) {
      return e.what();
    }
    return "";
  }

  void SetUp() override {
    options_.allowed_domains = {"127.0.0.1"};
    options_.timeout = milliseconds(2000);
  }

  test::TlsIdentity identity_;
  std::unique_ptr<LocalHttpServer> server_;
  HttpFetchOptions options_;
};

// The system's trust store does not hold a certificate made here: verification refuses it.
TEST_F(TlsDownloads, AnUntrustedCertificateIsRefused) {
  serve(test::make_self_signed("IP:127.0.0.1"));
  const std::string e = error(server_->url("/image.png"));
  EXPECT_TRUE(contains(e, "the TLS certificate of the image server 127.0.0.1:") && contains(e, "is not accepted")) << e;
  EXPECT_TRUE(contains(e, "self-signed") || contains(e, "self signed")) << e;
}

TEST_F(TlsDownloads, ATrustedCertificateForTheHostIsAccepted) {
  serve(test::make_self_signed("IP:127.0.0.1"));
  options_.extra_ca_pem = identity_.cert_pem;
  EXPECT_EQ(fetch_remote_image(server_->url("/image.png"), options_), bytes_of(tiny_png()));
}

// Trusted, but issued for another host: the host check refuses it.
TEST_F(TlsDownloads, ATrustedCertificateForAnotherHostIsRefused) {
  serve(test::make_self_signed("DNS:other.example"));
  options_.extra_ca_pem = identity_.cert_pem;
  const std::string e = error(server_->url("/image.png"));
  EXPECT_TRUE(contains(e, "is not accepted") && contains(e, "mismatch")) << e;
}

TEST_F(TlsDownloads, ARedirectFromHttpsToHttpIsRefused) {
  serve(test::make_self_signed("IP:127.0.0.1"));
  options_.extra_ca_pem = identity_.cert_pem;
  const std::string e = error(server_->url("/downgrade"));
  EXPECT_TRUE(contains(e, "redirects from https to http")) << e;
}

}  // namespace
}  // namespace ds
