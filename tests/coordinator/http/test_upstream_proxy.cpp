// UpstreamProxy against a scripted fake upstream on 127.0.0.1: what is forwarded, what is
// relayed (plain and streamed), and each failure's status and message.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cctype>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "coordinator/http/api_error.h"
#include "coordinator/http/http_server.h"
#include "coordinator/http/router.h"
#include "coordinator/http/upstream_proxy.h"
#include "tests/coordinator/openai/recording_channel.h"

namespace ds::test {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

// What the fake upstream received.
struct Seen {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;

  std::string header(const std::string& lower_name) const {
    for (const auto& [k, v] : headers) {
      if (k == lower_name) return v;
    }
    return {};
  }
  bool has_header(const std::string& lower_name) const {
    for (const auto& [k, v] : headers) {
      if (k == lower_name) return true;
    }
    return false;
  }
};

// A blocking HTTP/1.1 server on its own threads: each connection's request is recorded, then
// the test's script writes whatever bytes it likes and the connection closes.
class FakeUpstream {
 public:
  using Script = std::function<void(tcp::socket&, const Seen&, FakeUpstream&)>;

  explicit FakeUpstream(Script script, uint16_t port = 0) : script_(std::move(script)) {
    const tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), port);
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~FakeUpstream() { stop(); }

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Closes the listening socket (connections refused from then on) and ends every connection.
  void stop() {
    if (stopped_.exchange(true)) return;
    release();
    {
      // A blocking accept() is not woken by close(): a connection of our own wakes it.
      beast::error_code ignored;
      tcp::socket wake(io_);
      wake.connect({net::ip::make_address("127.0.0.1"), port_}, ignored);
      accept_thread_.join();
    }
    beast::error_code ignored;
    acceptor_.close(ignored);
    for (auto& t : connections_) t.join();
  }

  // Scripts that hold their reply wait here until the test (or stop()) releases them.
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  void wait_released() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 10s, [this] { return released_; });
  }

  // Waits until `n` requests have arrived; returns them.
  std::vector<Seen> wait_requests(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 10s, [&] { return seen_.size() >= n; });
    return seen_;
  }

  // Set by a script that saw the proxy close its end.
  void note_peer_closed() {
    std::lock_guard<std::mutex> lock(mu_);
    peer_closed_ = true;
    cv_.notify_all();
  }
  bool wait_peer_closed() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 10s, [this] { return peer_closed_; });
  }

 private:
  void accept_loop() {
    for (;;) {
      tcp::socket socket(io_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (stopped_ || ec) return;
      connections_.emplace_back([this, s = std::move(socket)]() mutable { serve(s); });
    }
  }

  void serve(tcp::socket& socket) {
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    beast::error_code ec;
    http::read(socket, buffer, req, ec);
    if (ec) return;
    Seen seen;
    seen.method = std::string(req.method_string());
    seen.target = std::string(req.target());
    for (const auto& field : req) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      seen.headers.emplace_back(std::move(name), std::string(field.value()));
    }
    seen.body = req.body();
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(seen);
      cv_.notify_all();
    }
    try {
      script_(socket, seen, *this);
    } catch (const std::exception&) {
      // The proxy hung up first (cancel tests): nothing left to do.
    }
  }

  Script script_;
  net::io_context io_;
  tcp::acceptor acceptor_{io_};
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::vector<std::thread> connections_;  // joined in stop(); only the accept thread adds
  std::atomic<bool> stopped_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Seen> seen_;
  bool released_ = false;
  bool peer_closed_ = false;
};

void write_all(tcp::socket& socket, const std::string& bytes) {
  net::write(socket, net::buffer(bytes));
}

std::string plain_response(int status, const std::string& content_type, const std::string& body,
                           const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers + "Connection: close\r\n\r\n" +
         body;
}

std::string chunk(const std::string& bytes) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx", bytes.size());
  return std::string(size) + "\r\n" + bytes + "\r\n";
}

FakeUpstream::Script answer(int status, const std::string& content_type, const std::string& body,
                            const std::string& extra_headers = "") {
  return [=](tcp::socket& s, const Seen&, FakeUpstream&) {
    write_all(s, plain_response(status, content_type, body, extra_headers));
  };
}

HttpRequest post(const std::string& path, const std::string& body, const std::string& query = "") {
  HttpRequest r;
  r.method = "POST";
  r.path = path;
  r.query = query;
  r.headers = {{"content-type", "application/json"}, {"host", "client-facing:8000"}};
  r.body = body;
  return r;
}

UpstreamOptions options_for(const std::string& url) {
  UpstreamOptions o;
  o.url = url;
  o.role = "embedding";
  return o;
}

// A port where nothing listens (bound, read, released).
uint16_t free_port() {
  net::io_context io;
  tcp::acceptor a(io, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

std::string expected_error(int status, const std::string& message, const std::string& code) {
  return error_response(status, message, {}, code).body;
}

// Polls `predicate` (a condition the test needs before it goes on, not a timing check).
bool eventually(const std::function<bool()>& predicate) {
  for (int i = 0; i < 1000; ++i) {
    if (predicate()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return predicate();
}

// ---- forwarding ------------------------------------------------------------------------------

TEST(UpstreamProxy, ForwardsMethodPathQueryBodyAndHeaders) {
  FakeUpstream upstream(answer(200, "application/json", R"({"data":[]})"));
  UpstreamProxy proxy(options_for(upstream.url() + "/prefix/"));
  HttpRequest request = post("/v1/embeddings", R"({"input":"hi"})", "x=1&y=2");
  request.headers.emplace_back("accept", "application/json");
  request.headers.emplace_back("authorization", "Bearer client-key");
  request.headers.emplace_back("x-forwarded-for", "10.0.0.1");
  request.headers.emplace_back("x-request-id", "req-7");
  request.headers.emplace_back("cookie", "session=secret");
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(request, channel, "192.168.1.5");
  ASSERT_TRUE(channel->wait());

  const auto seen = upstream.wait_requests(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].target, "/prefix/v1/embeddings?x=1&y=2");
  EXPECT_EQ(seen[0].body, R"({"input":"hi"})");
  EXPECT_EQ(seen[0].header("content-type"), "application/json");
  EXPECT_EQ(seen[0].header("accept"), "application/json");
  EXPECT_EQ(seen[0].header("authorization"), "Bearer client-key");
  EXPECT_EQ(seen[0].header("x-forwarded-for"), "10.0.0.1, 192.168.1.5");
  EXPECT_EQ(seen[0].header("x-request-id"), "req-7");
  EXPECT_EQ(seen[0].header("host"), "127.0.0.1:" + std::to_string(upstream.port()));
  EXPECT_FALSE(seen[0].has_header("cookie"));

  EXPECT_EQ(channel->status(), 200);
  EXPECT_EQ(channel->content_type(), "application/json");
  EXPECT_EQ(channel->body(), R"({"data":[]})");
  EXPECT_FALSE(channel->streamed());
}

TEST(UpstreamProxy, ForwardsTheClientAddressAsANewForwardedForChain) {
  FakeUpstream upstream(answer(200, "application/json", "{}"));
  UpstreamProxy proxy(options_for(upstream.url()));
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/rerank", "{}"), channel, "192.168.1.5");
  ASSERT_TRUE(channel->wait());
  const auto seen = upstream.wait_requests(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].target, "/v1/rerank");
  EXPECT_EQ(seen[0].header("x-forwarded-for"), "192.168.1.5");
  EXPECT_FALSE(seen[0].has_header("authorization"));
}

TEST(UpstreamProxy, ReplacesTheClientAuthorizationWhenAnApiKeyIsSet) {
  FakeUpstream upstream(answer(200, "application/json", "{}"));
  UpstreamOptions options = options_for(upstream.url());
  options.api_key = "upstream-key";
  UpstreamProxy proxy(options);
  HttpRequest with_key = post("/v1/score", "{}");
  with_key.headers.emplace_back("authorization", "Bearer client-key");
  auto first = std::make_shared<RecordingChannel>();
  proxy.forward(with_key, first);
  ASSERT_TRUE(first->wait());
  auto second = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/score", "{}"), second);  // a client without a key
  ASSERT_TRUE(second->wait());

  const auto seen = upstream.wait_requests(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].header("authorization"), "Bearer upstream-key");
  EXPECT_EQ(seen[1].header("authorization"), "Bearer upstream-key");
}

TEST(UpstreamProxy, RelaysTheUpstreamErrorStatusAndBody) {
  const std::string body = R"({"error":{"message":"input is empty","type":"invalid_request_error"}})";
  FakeUpstream upstream(answer(400, "application/json", body));
  UpstreamProxy proxy(options_for(upstream.url()));
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(channel->wait());
  EXPECT_EQ(channel->status(), 400);
  EXPECT_EQ(channel->body(), body);
}

TEST(UpstreamProxy, RelaysRetryAfterOfAnOverloadedUpstream) {
  FakeUpstream upstream(answer(429, "application/json", R"({"error":{}})", "Retry-After: 3\r\n"));
  UpstreamProxy proxy(options_for(upstream.url()));
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(channel->wait());
  EXPECT_EQ(channel->status(), 429);
  EXPECT_EQ(channel->header("Retry-After"), "3");
}

TEST(UpstreamProxy, RelaysAnEventStreamWhileItArrives) {
  FakeUpstream upstream([](tcp::socket& s, const Seen&, FakeUpstream& self) {
    write_all(s,
              "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
              "Connection: close\r\n\r\n" +
                  chunk("data: 1\n\n"));
    self.wait_released();  // the first event must reach the client before the second is sent
    write_all(s, chunk("data: 2\n\n") + "0\r\n\r\n");
  });
  UpstreamProxy proxy(options_for(upstream.url()));
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);

  ASSERT_TRUE(eventually([&] { return channel->body() == "data: 1\n\n"; })) << channel->body();
  EXPECT_TRUE(channel->streamed());
  EXPECT_FALSE(channel->done());
  upstream.release();
  ASSERT_TRUE(channel->wait());
  EXPECT_EQ(channel->status(), 200);
  EXPECT_EQ(channel->content_type(), "text/event-stream");
  EXPECT_EQ(channel->body(), "data: 1\n\ndata: 2\n\n");
}

TEST(UpstreamProxy, AStreamCutByTheUpstreamEndsWithAnErrorEvent) {
  FakeUpstream upstream([](tcp::socket& s, const Seen&, FakeUpstream&) {
    write_all(s, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
                     chunk("data: 1\n\n"));
  });  // closes without the last chunk
  UpstreamProxy proxy(options_for(upstream.url()));
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(channel->wait());
  const auto events = sse_payloads(channel->body());
  ASSERT_EQ(events.size(), 2u) << channel->body();
  EXPECT_EQ(events[0], "1");
  EXPECT_NE(events[1].find("closed the connection before its reply was complete"), std::string::npos);
}

// ---- failures --------------------------------------------------------------------------------

TEST(UpstreamProxy, AnUnreachableUpstreamIsA502NamingIt) {
  const uint16_t port = free_port();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  UpstreamProxy proxy(options_for(url));
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(channel->wait());
  EXPECT_EQ(channel->status(), 502);
  EXPECT_EQ(channel->content_type(), "application/json");
  EXPECT_EQ(channel->body(),
            expected_error(502, "the embedding upstream " + url + " is unreachable: Connection refused",
                           "upstream_unreachable"));
}

TEST(UpstreamProxy, TheNextRequestWorksOnceTheUpstreamIsBack) {
  auto upstream = std::make_unique<FakeUpstream>(answer(200, "application/json", R"({"n":1})"));
  const uint16_t port = upstream->port();
  UpstreamProxy proxy(options_for(upstream->url()));
  auto first = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), first);
  ASSERT_TRUE(first->wait());
  EXPECT_EQ(first->status(), 200);

  upstream.reset();  // killed
  auto while_down = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), while_down);
  ASSERT_TRUE(while_down->wait());
  EXPECT_EQ(while_down->status(), 502);

  upstream = std::make_unique<FakeUpstream>(answer(200, "application/json", R"({"n":2})"), port);  // restarted
  auto after = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), after);
  ASSERT_TRUE(after->wait());
  EXPECT_EQ(after->status(), 200);
  EXPECT_EQ(after->body(), R"({"n":2})");
}

TEST(UpstreamProxy, ASilentUpstreamIsA504) {
  FakeUpstream upstream([](tcp::socket&, const Seen&, FakeUpstream& self) { self.wait_released(); });
  UpstreamOptions options = options_for(upstream.url());
  options.response_timeout = 200ms;
  UpstreamProxy proxy(options);
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(channel->wait());
  EXPECT_EQ(channel->status(), 504);
  EXPECT_EQ(channel->body(),
            expected_error(504, "the embedding upstream " + upstream.url() + " did not answer within 200 ms",
                           "upstream_timeout"));
}

TEST(UpstreamProxy, AResponseOverTheLimitIsA502) {
  FakeUpstream upstream(answer(200, "application/json", std::string(5000, 'x')));
  UpstreamOptions options = options_for(upstream.url());
  options.max_response_bytes = 1000;
  UpstreamProxy proxy(options);
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(channel->wait());
  EXPECT_EQ(channel->status(), 502);
  EXPECT_EQ(channel->body(),
            expected_error(502, "the embedding upstream " + upstream.url() + " sent a response larger than 1000 bytes",
                           "upstream_response_too_large"));
}

TEST(UpstreamProxy, AnUnframedResponseOverTheLimitIsA502) {
  // No length, no chunks: the body runs until the upstream closes.
  FakeUpstream upstream([](tcp::socket& s, const Seen&, FakeUpstream&) {
    write_all(
        s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + std::string(5000, 'x'));
  });
  UpstreamOptions options = options_for(upstream.url());
  options.max_response_bytes = 1000;
  UpstreamProxy proxy(options);
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(channel->wait());
  EXPECT_EQ(channel->status(), 502);
}

TEST(UpstreamProxy, AnUnframedResponseIsRelayedWhole) {
  FakeUpstream upstream([](tcp::socket& s, const Seen&, FakeUpstream&) {
    write_all(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" +
                     std::string(100'000, 'x'));
  });
  UpstreamProxy proxy(options_for(upstream.url()));
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(channel->wait());
  EXPECT_EQ(channel->status(), 200);
  EXPECT_EQ(channel->body(), std::string(100'000, 'x'));
}

TEST(UpstreamProxy, AnUpstreamThatHangsUpWithoutAnsweringIsA502) {
  FakeUpstream upstream([](tcp::socket&, const Seen&, FakeUpstream&) {});
  UpstreamProxy proxy(options_for(upstream.url()));
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(channel->wait());
  EXPECT_EQ(channel->status(), 502);
  EXPECT_EQ(channel->body(),
            expected_error(502, "the embedding upstream " + upstream.url() + " closed the connection without answering",
                           "upstream_closed"));
}

TEST(UpstreamProxy, AMalformedResponseIsA502) {
  FakeUpstream upstream([](tcp::socket& s, const Seen&, FakeUpstream&) { write_all(s, "SPDY/9 hello\r\n\r\n"); });
  UpstreamProxy proxy(options_for(upstream.url()));
  auto channel = std::make_shared<RecordingChannel>();
  proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(channel->wait());
  EXPECT_EQ(channel->status(), 502);
  EXPECT_NE(channel->body().find("sent a malformed HTTP response"), std::string::npos) << channel->body();
}

TEST(UpstreamProxy, AClientDisconnectClosesTheUpstreamRequest) {
  FakeUpstream upstream([](tcp::socket& s, const Seen&, FakeUpstream& self) {
    char byte = 0;
    beast::error_code ec;
    s.read_some(net::buffer(&byte, 1), ec);  // returns once the proxy closes its end
    self.note_peer_closed();
  });
  UpstreamProxy proxy(options_for(upstream.url()));
  auto channel = std::make_shared<RecordingChannel>();
  const DisconnectHook hook = proxy.forward(post("/v1/embeddings", "{}"), channel);
  ASSERT_TRUE(hook);
  ASSERT_EQ(upstream.wait_requests(1).size(), 1u);
  hook();
  EXPECT_TRUE(upstream.wait_peer_closed());
  EXPECT_FALSE(channel->done());
}

TEST(UpstreamProxy, StoppingTheProxyAnswersRequestsInFlight) {
  FakeUpstream upstream([](tcp::socket&, const Seen&, FakeUpstream& self) { self.wait_released(); });
  auto channel = std::make_shared<RecordingChannel>();
  {
    UpstreamProxy proxy(options_for(upstream.url()));
    proxy.forward(post("/v1/embeddings", "{}"), channel);
    ASSERT_EQ(upstream.wait_requests(1).size(), 1u);
  }
  ASSERT_TRUE(channel->done());
  EXPECT_EQ(channel->status(), 503);
}

// ---- through the HTTP server ------------------------------------------------------------------

// The proxy behind the real front door, as the service mounts it: the client sees the
// upstream's bytes, streamed or not, and its disconnect reaches the upstream.
class ThroughServer : public ::testing::Test {
 protected:
  void start(FakeUpstream& upstream) {
    proxy_ = std::make_unique<UpstreamProxy>(options_for(upstream.url()));
    router_.add("POST", "/v1/embeddings", [this](HttpRequest& r, std::shared_ptr<ResponseChannel> c) {
      return proxy_->forward(r, std::move(c));
    });
    ServerOptions options;
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options, router_, nullptr);
    server_->start();
  }
  void TearDown() override {
    if (server_) server_->stop();
  }

  tcp::socket connect_and_post(const std::string& body) {
    tcp::socket socket(io_);
    socket.connect({net::ip::make_address("127.0.0.1"), server_->port()});
    http::request<http::string_body> req{http::verb::post, "/v1/embeddings", 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(socket, req);
    return socket;
  }

  net::io_context io_;
  Router router_{"", nullptr};
  std::unique_ptr<UpstreamProxy> proxy_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(ThroughServer, AClientReadsTheUpstreamEventStream) {
  FakeUpstream upstream([](tcp::socket& s, const Seen&, FakeUpstream&) {
    write_all(s, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
                     chunk("data: 1\n\n") + chunk("data: [DONE]\n\n") + "0\r\n\r\n");
  });
  start(upstream);
  tcp::socket socket = connect_and_post(R"({"input":"x"})");
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(socket, buffer, res);
  EXPECT_EQ(res.result_int(), 200u);
  EXPECT_EQ(res[http::field::content_type], "text/event-stream");
  EXPECT_EQ(res.body(), "data: 1\n\ndata: [DONE]\n\n");
  EXPECT_EQ(upstream.wait_requests(1).at(0).body, R"({"input":"x"})");
}

TEST_F(ThroughServer, AClientThatLeavesClosesTheUpstreamRequest) {
  FakeUpstream upstream([](tcp::socket& s, const Seen&, FakeUpstream& self) {
    char byte = 0;
    beast::error_code ec;
    s.read_some(net::buffer(&byte, 1), ec);  // returns once the proxy closes its end
    self.note_peer_closed();
  });
  start(upstream);
  {
    tcp::socket socket = connect_and_post("{}");
    ASSERT_EQ(upstream.wait_requests(1).size(), 1u);
  }  // the client hangs up before any reply
  EXPECT_TRUE(upstream.wait_peer_closed());
}

// ---- URLs ------------------------------------------------------------------------------------

TEST(ParseUpstreamUrl, AcceptsHostPortAndPrefix) {
  const UpstreamUrl a = parse_upstream_url("http://127.0.0.1:8001");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 8001);
  EXPECT_EQ(a.base_path, "");
  EXPECT_EQ(a.origin(), "http://127.0.0.1:8001");

  const UpstreamUrl b = parse_upstream_url("HTTP://embed.internal/api/");
  EXPECT_EQ(b.host, "embed.internal");
  EXPECT_EQ(b.port, 80);
  EXPECT_EQ(b.base_path, "/api");
  EXPECT_EQ(b.host_header(), "embed.internal");

  const UpstreamUrl c = parse_upstream_url("http://[::1]:65535/");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 65535);
  EXPECT_EQ(c.base_path, "");
  EXPECT_EQ(c.host_header(), "[::1]:65535");
}

std::string rejection(const std::string& url) {
  try {
    parse_upstream_url(url);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ParseUpstreamUrl, RejectsHttpsWithAClearMessage) {
  const std::string why = rejection("https://embed.internal:8443");
  EXPECT_NE(why.find("'https://embed.internal:8443'"), std::string::npos) << why;
  EXPECT_NE(why.find("https is not supported"), std::string::npos) << why;
  EXPECT_THROW(UpstreamProxy(options_for("https://embed.internal:8443")), std::invalid_argument);
}

TEST(ParseUpstreamUrl, RejectsMalformedUrls) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "no scheme"},
      {"127.0.0.1:8001", "no scheme"},
      {"ftp://host", "scheme 'ftp'"},
      {"http://", "no host"},
      {"http://:8001", "no host"},
      {"http://host:", "port is empty"},
      {"http://host:0", "outside 1..65535"},
      {"http://host:65536", "outside 1..65535"},
      {"http://host:99999999999999999999", "outside 1..65535"},
      {"http://host:80a", "not a number"},
      {"http://user:pw@host", "user info"},
      {"http://host/path?x=1", "query or a fragment"},
      {"http://host#top", "query or a fragment"},
      {"http://::1:80", "brackets"},
      {"http://[::1", "closing ']'"},
      {"http://[::1]x", "after the IPv6 address"},
      {"http://ho st", "space"},
      {"http://ho$t", "not allowed in a host name"},
  };
  for (const auto& [url, expected] : cases) {
    const std::string why = rejection(url);
    EXPECT_NE(why.find(expected), std::string::npos) << url << " -> " << why;
  }
}

}  // namespace
}  // namespace ds::test
