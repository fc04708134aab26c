// A blocking HTTP/1.1 test client over a real socket and the server fixture (the OpenAI
// service over a FakeEngine behind the Beast server on an ephemeral port), shared by the
// HTTP test files.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <csignal>
#include <future>
#include <thread>

#include "coordinator/http/http_server.h"
#include "coordinator/openai/openai_server.h"
#include "coordinator/openai/service.h"
#include "tests/coordinator/openai/fake_engine.h"
#include "tests/coordinator/openai/recording_channel.h"
#include "tests/coordinator/openai/service_fixture.h"

namespace ds::test {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Response = http::response<http::string_body>;

const std::string kChat =
    R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false}})";
const std::string kStreamChat =
    R"({"messages":[{"role":"user","content":"hi"}],"stream":true,"chat_template_kwargs":{"enable_thinking":false}})";

// A blocking HTTP/1.1 client on one connection.
class Client {
 public:
  explicit Client(uint16_t port) { socket_.connect({net::ip::make_address("127.0.0.1"), port}); }

  void send(const std::string& method, const std::string& target, const std::string& body = "",
            bool keep_alive = true) {
    http::request<http::string_body> req{method == "GET" ? http::verb::get : http::verb::post, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.keep_alive(keep_alive);
    req.body() = body;
    req.prepare_payload();
    http::write(socket_, req);
  }
  Response receive() {
    Response res;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    http::read(socket_, buffer_, parser);
    return parser.release();
  }
  Response request(const std::string& method, const std::string& target, const std::string& body = "") {
    send(method, target, body);
    return receive();
  }
  void send_raw(const std::string& bytes) { net::write(socket_, net::buffer(bytes)); }
  // Blocking reads give up after `timeout` (read_until then returns what it has), so a test of
  // a server that does not answer fails instead of hanging.
  void set_read_timeout(std::chrono::milliseconds timeout) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  // Everything the server sends until it closes the connection (or the read timeout).
  std::string read_all() { return read_until(std::string(1, '\0') + "never"); }
  // Raw bytes until `needle` has been seen (or the connection ends).
  std::string read_until(const std::string& needle) {
    std::string got;
    char buf[4096];
    beast::error_code ec;
    while (got.find(needle) == std::string::npos) {
      const size_t n = socket_.read_some(net::buffer(buf), ec);
      if (ec) break;
      got.append(buf, n);
    }
    return got;
  }
  // True when the server has closed the connection (EOF or reset) within `timeout`.
  bool closed_by_server(std::chrono::milliseconds timeout) {
    socket_.non_blocking(true);
    const auto until = std::chrono::steady_clock::now() + timeout;
    char c;
    while (std::chrono::steady_clock::now() < until) {
      beast::error_code ec;
      socket_.read_some(net::buffer(&c, 1), ec);
      if (ec == net::error::would_block) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      return static_cast<bool>(ec);
    }
    return false;
  }
  void close() {
    beast::error_code ec;
    socket_.close(ec);
  }

 private:
  net::io_context ioc_;
  tcp::socket socket_{ioc_};
  beast::flat_buffer buffer_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.port = 0;
    options_.served_model_name = "tiny";
    options_.max_body_bytes = 4096;
    options_.shutdown_grace = std::chrono::milliseconds(5000);
  }
  void TearDown() override {
    if (server_) server_->stop();
    engine_.join();
    server_.reset();
    service_.reset();
  }
  void start() {
    service_ = std::make_unique<openai::OpenAIService>(options_, engine_, ModelFixture::get().tokenizer,
                                                       ModelFixture::get().chat_template, metrics_);
    server_ = std::make_unique<HttpServer>(options_, service_->handler(), &metrics_);
    server_->start();
    ASSERT_NE(server_->port(), 0);
  }
  void script(const std::string& text, std::chrono::milliseconds delay = std::chrono::milliseconds(0)) {
    FakeScript s;
    s.tokens = ModelFixture::get().tokenizer.encode(text, true);
    s.delay = delay;
    engine_.set_script(s);
  }

  ServerOptions options_;
  FakeEngine engine_;
  ServerMetrics metrics_;
  std::unique_ptr<openai::OpenAIService> service_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace ds::test
