// The Beast server over real sockets on an ephemeral port: keep-alive, pipelining, SSE
// framing, limits, timeouts, client disconnects and graceful shutdown.
#include "tests/coordinator/http/http_test_client.h"

namespace ds::test {
namespace {

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  start();
  script("Hello there");
  Client c(server_->port());
  for (int i = 0; i < 3; ++i) {
    Response r = c.request("GET", "/health");
    EXPECT_EQ(r.result_int(), 200);
    EXPECT_TRUE(r.keep_alive());
    r = c.request("POST", "/v1/chat/completions", kChat);
    EXPECT_EQ(r.result_int(), 200) << r.body();
    EXPECT_NE(r.body().find("\"content\":\"Hello there\""), std::string::npos) << r.body();
    EXPECT_EQ(r[http::field::content_type], "application/json");
  }
  EXPECT_EQ(engine_.submitted().size(), 3u);
}

TEST_F(HttpServerTest, PipelinedRequestsAnswerInOrder) {
  start();
  const std::string one = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string two = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string three = "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n";
  Client c(server_->port());
  c.send_raw(one + two + three);
  EXPECT_NE(c.receive().body().find("ok"), std::string::npos);
  EXPECT_NE(c.receive().body().find("\"list\""), std::string::npos);
  EXPECT_EQ(c.receive().result_int(), 404);
}

TEST_F(HttpServerTest, SseFramingEndsWithDone) {
  start();
  script("streaming over the wire");
  Client c(server_->port());
  c.send("POST", "/v1/chat/completions", kStreamChat);
  Response r = c.receive();
  ASSERT_EQ(r.result_int(), 200);
  EXPECT_EQ(r[http::field::content_type], "text/event-stream");
  EXPECT_TRUE(r.chunked());
  EXPECT_EQ(r[http::field::cache_control], "no-cache");
  const auto events = sse_payloads(r.body());
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(r.body().substr(r.body().size() - 14), "data: [DONE]\n\n");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    rapidjson::Document d;
    d.Parse(events[i].c_str());
    ASSERT_FALSE(d.HasParseError()) << events[i];
    const auto& delta = d["choices"][0]["delta"];
    if (delta.HasMember("content")) text += delta["content"].GetString();
  }
  EXPECT_EQ(text, "streaming over the wire");
  // The connection stays usable after a stream.
  EXPECT_EQ(c.request("GET", "/health").result_int(), 200);
}

TEST_F(HttpServerTest, BodyTooLargeIs413) {
  start();
  Client c(server_->port());
  c.send("POST", "/v1/chat/completions", std::string(8192, 'x'));
  Response r = c.receive();
  EXPECT_EQ(r.result_int(), 413);
  EXPECT_NE(r.body().find("\"error\""), std::string::npos);
  EXPECT_FALSE(r.keep_alive());
  EXPECT_TRUE(c.closed_by_server(std::chrono::milliseconds(3000)));
  EXPECT_EQ(metrics_.status_count(413), 1u);
}

TEST_F(HttpServerTest, MalformedJsonIs400AndConnectionSurvives) {
  start();
  Client c(server_->port());
  Response r = c.request("POST", "/v1/chat/completions", "{\"messages\": [");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_NE(r.body().find("invalid_request_error"), std::string::npos);
  EXPECT_TRUE(r.keep_alive());
  EXPECT_EQ(c.request("GET", "/health").result_int(), 200);
}

TEST_F(HttpServerTest, MalformedHttpIs400) {
  start();
  Client c(server_->port());
  c.send_raw("THIS IS NOT HTTP\r\n\r\n");
  Response r = c.receive();
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_TRUE(c.closed_by_server(std::chrono::milliseconds(3000)));
}

TEST_F(HttpServerTest, OversizedHeaderIs431) {
  options_.max_header_bytes = 1024;
  start();
  Client c(server_->port());
  c.send_raw("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n");
  EXPECT_EQ(c.receive().result_int(), 431);
}

TEST_F(HttpServerTest, IdleConnectionTimesOut) {
  options_.idle_timeout = std::chrono::milliseconds(200);
  start();
  Client c(server_->port());
  EXPECT_EQ(c.request("GET", "/health").result_int(), 200);
  EXPECT_TRUE(c.closed_by_server(std::chrono::milliseconds(3000)));
}

TEST_F(HttpServerTest, ClientDisconnectMidStreamCancelsTheRequest) {
  start();
  script("a b c d e f g h i j k l m n o p q r s t u v w x y z", std::chrono::milliseconds(40));
  Client c(server_->port());
  c.send("POST", "/v1/chat/completions", kStreamChat);
  const std::string got = c.read_until("\"content\":\" b\"");
  EXPECT_NE(got.find("text/event-stream"), std::string::npos);
  c.close();
  ASSERT_TRUE(engine_.wait_for_cancel(std::chrono::milliseconds(3000)));
  EXPECT_TRUE(engine_.was_cancelled(engine_.submitted()[0].request_id));
}

TEST_F(HttpServerTest, ClientDisconnectDuringNonStreamingRequestCancels) {
  start();
  script("a b c d e f g h i j k l m n o p", std::chrono::milliseconds(50));
  Client c(server_->port());
  c.send("POST", "/v1/chat/completions", kChat);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  c.close();
  EXPECT_TRUE(engine_.wait_for_cancel(std::chrono::milliseconds(3000)));
}

TEST_F(HttpServerTest, StopLetsInFlightStreamsFinish) {
  start();
  script("one two three four five six", std::chrono::milliseconds(30));
  Client c(server_->port());
  c.send("POST", "/v1/chat/completions", kStreamChat);
  c.read_until("data: ");
  std::thread stopper([this] { server_->stop(); });
  Response rest;
  const std::string tail = c.read_until("data: [DONE]\n\n");
  stopper.join();
  EXPECT_NE(tail.find("[DONE]"), std::string::npos);
  EXPECT_FALSE(engine_.was_cancelled(engine_.submitted()[0].request_id));
  EXPECT_THROW(Client{server_->port()}, boost::system::system_error);  // no longer listening
}

TEST_F(HttpServerTest, StopCancelsRequestsThatOutliveTheGrace) {
  options_.shutdown_grace = std::chrono::milliseconds(150);
  start();
  script("a b c d e f g h i j k l m n o p q r s t u v w x y z", std::chrono::milliseconds(100));
  Client c(server_->port());
  c.send("POST", "/v1/chat/completions", kStreamChat);
  c.read_until("data: ");
  c.set_read_timeout(std::chrono::milliseconds(10000));
  const auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([this] { server_->stop(); });
  const std::string tail = c.read_all();
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(5000));
  EXPECT_TRUE(engine_.wait_for_cancel(std::chrono::milliseconds(2000)));
  // The stream is ended, not cut: an error event, [DONE], then the last chunk.
  const size_t error = tail.find("\"code\":\"server_shutdown\"");
  ASSERT_NE(error, std::string::npos) << tail;
  const size_t done = tail.find("data: [DONE]\n\n", error);
  ASSERT_NE(done, std::string::npos) << tail;
  EXPECT_EQ(tail.substr(tail.size() - 5), "0\r\n\r\n") << tail;
}

TEST_F(HttpServerTest, SigtermStopsRunHttpServerGracefully) {
  script("one two three", std::chrono::milliseconds(20));
  std::promise<uint16_t> port;
  auto result = std::async(std::launch::async, [&] {
    return run_http_server(options_, engine_, ModelFixture::get().tokenizer, ModelFixture::get().chat_template,
                           &metrics_, [&](uint16_t p) { port.set_value(p); });
  });
  const uint16_t p = port.get_future().get();
  Client c(p);
  EXPECT_EQ(c.request("GET", "/health").result_int(), 200);
  c.send("POST", "/v1/chat/completions", kStreamChat);
  c.read_until("data: ");
  std::raise(SIGTERM);
  EXPECT_NE(c.read_until("data: [DONE]\n\n").find("[DONE]"), std::string::npos);
  ASSERT_EQ(result.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(result.get(), 0);
}

}  // namespace
}  // namespace ds::test
