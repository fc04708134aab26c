// The front door under hostile input, over real sockets: request smuggling through
// Transfer-Encoding, POST bodies that are not declared JSON, request work that must not hold
// the I/O threads, admission counted at the door, and JSON the parser must refuse.
#include <atomic>
#include <thread>
#include <vector>

#include "coordinator/openai/admission.h"
#include "tests/coordinator/http/http_test_client.h"

namespace ds::test {
namespace {

size_t count_of(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

const std::string kSmuggled = "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

// The attack run's reproduction: the bytes after a request whose Transfer-Encoding does not
// end in `chunked` must never run as a request of their own.
TEST_F(HttpServerTest, TransferEncodingNotEndingInChunkedIsRefusedAndNothingIsSmuggled) {
  start();
  for (const std::string te :
       {"chunked, identity", "identity", "gzip", "xchunked", "chunked, identity\r\nContent-Length: 0", "gzip, chunked",
        "chunked, chunked", "chunked\r\nTransfer-Encoding: identity"}) {
    Client c(server_->port());
    c.set_read_timeout(std::chrono::milliseconds(10000));
    c.send_raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: " +
               te + "\r\n\r\n" + kSmuggled);
    const std::string got = c.read_all();
    EXPECT_EQ(count_of(got, "HTTP/1.1 "), 1u) << te << "\n" << got;
    EXPECT_TRUE(got.rfind("HTTP/1.1 400", 0) == 0 || got.rfind("HTTP/1.1 501", 0) == 0) << te << "\n" << got;
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << te;
    EXPECT_EQ(got.find("\"object\":\"list\""), std::string::npos) << te << ": the smuggled request ran";
  }
  EXPECT_TRUE(engine_.submitted().empty());
}

TEST_F(HttpServerTest, TransferEncodingWithContentLengthIsRefusedAndCloses) {
  start();
  Client c(server_->port());
  c.set_read_timeout(std::chrono::milliseconds(10000));
  const std::string body = "0\r\n\r\n";
  c.send_raw(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5\r\n"
      "Transfer-Encoding: chunked\r\n\r\n" +
      body + kSmuggled);
  const std::string got = c.read_all();
  EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
  EXPECT_EQ(count_of(got, "HTTP/1.1 "), 1u) << got;
}

TEST_F(HttpServerTest, ChunkedRequestBodyIsStillServed) {
  start();
  script("Hello there");
  Client c(server_->port());
  const std::string body = kChat;
  c.send_raw(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n" +
      [&] {
        char size[16];
        std::snprintf(size, sizeof size, "%zx", body.size());
        return std::string(size);
      }() +
      "\r\n" + body + "\r\n0\r\n\r\n");
  const Response r = c.receive();
  EXPECT_EQ(r.result_int(), 200) << r.body();
  EXPECT_TRUE(r.keep_alive());
}

// A cross-origin page can POST text/plain, form or multipart bodies without a preflight; none
// of them may reach a handler.
TEST_F(HttpServerTest, PostBodiesMustBeDeclaredJson) {
  start();
  script("Hello there");
  auto status_for = [&](const std::string& content_type_line) {
    Client c(server_->port());
    c.set_read_timeout(std::chrono::milliseconds(10000));
    c.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + content_type_line +
               "Content-Length: " + std::to_string(kChat.size()) + "\r\nConnection: close\r\n\r\n" + kChat);
    const std::string got = c.read_all();
    return got.size() > 12 ? std::stoi(got.substr(9, 3)) : 0;
  };
  for (const char* refused :
       {"", "Content-Type: text/plain\r\n", "Content-Type: application/x-www-form-urlencoded\r\n",
        "Content-Type: multipart/form-data; boundary=x\r\n", "Content-Type: application/json; charset=latin1\r\n",
        "Content-Type: application/jsonx\r\n", "Content-Type: text/plain; a=application/json\r\n"}) {
    EXPECT_EQ(status_for(refused), 415) << refused;
  }
  EXPECT_TRUE(engine_.submitted().empty());
  for (const char* accepted :
       {"Content-Type: application/json\r\n", "Content-Type: Application/JSON; charset=\"UTF-8\"\r\n",
        "Content-Type: application/json;charset=utf-8\r\n"}) {
    EXPECT_EQ(status_for(accepted), 200) << accepted;
  }
}

// Request work (parsing, rendering, tokenizing, the engine's door) runs on the request threads:
// with all of them stuck and prompts of one 31 MiB word waiting behind them, /health and
// /v1/models still answer. No timing is asserted: with the old code (work on the two I/O
// threads) the held submits block the I/O threads and /health never answers.
TEST_F(HttpServerTest, HealthAnswersWhileRequestThreadsAreBusy) {
  options_.request_threads = 2;
  options_.max_body_bytes = size_t{40} << 20;
  start();
  script("Hello there");
  engine_.hold_submits(true);
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<Client>(server_->port()));
    held.back()->send("POST", "/v1/chat/completions", kChat);
  }
  ASSERT_TRUE(engine_.wait_held(2, std::chrono::milliseconds(10000)));
  const std::string word(size_t{31} << 20, 'a');
  const std::string bad = R"({"prompt":")" + word + R"(","max_tokens":4})";
  std::vector<std::unique_ptr<Client>> waiting;
  for (int i = 0; i < 8; ++i) {
    waiting.push_back(std::make_unique<Client>(server_->port()));
    waiting.back()->set_read_timeout(std::chrono::milliseconds(30000));
    waiting.back()->send("POST", "/v1/completions", bad);
  }
  Client probe(server_->port());
  probe.set_read_timeout(std::chrono::milliseconds(10000));
  probe.send("GET", "/health");
  EXPECT_EQ(probe.receive().result_int(), 200);
  probe.send("GET", "/v1/models");
  EXPECT_EQ(probe.receive().result_int(), 200);

  engine_.hold_submits(false);
  for (auto& c : held) EXPECT_EQ(c->receive().result_int(), 200);
  for (auto& c : waiting) {
    const Response r = c->receive();
    EXPECT_EQ(r.result_int(), 400);
    EXPECT_NE(r.body().find("context_length_exceeded"), std::string::npos) << r.body();
    EXPECT_NE(r.body().find("at least"), std::string::npos) << r.body();
  }
  EXPECT_EQ(engine_.submitted().size(), 2u);
}

// 20 requests arrive while none has reached the engine yet: the door admits exactly
// max_queue of them (the old check read only the engine's queue, still empty, and admitted all).
TEST_F(ServiceTest, SimultaneousArrivalsAreCountedAtTheDoor) {
  options_.max_queue = 5;
  options_.request_threads = 1;
  make_service();
  script("Hello there");
  engine_.hold_submits(true);
  std::vector<std::shared_ptr<RecordingChannel>> channels;
  std::vector<DisconnectHook> hooks;
  for (int i = 0; i < 20; ++i) {
    auto channel = std::make_shared<RecordingChannel>();
    HttpRequest r{
        "POST", "/v1/completions", "", {{"content-type", "application/json"}}, R"({"prompt":"hello","max_tokens":2})"};
    hooks.push_back(service_->handler().handle(std::move(r), channel));
    channels.push_back(channel);
  }
  size_t refused = 0;
  for (auto& c : channels) refused += c->done() && c->status() == 429;
  EXPECT_EQ(refused, 15u);
  engine_.hold_submits(false);
  size_t served = 0;
  for (auto& c : channels) {
    ASSERT_TRUE(c->wait());
    served += c->status() == 200;
  }
  EXPECT_EQ(served, 5u);
  EXPECT_EQ(engine_.submitted().size(), 5u);
}

TEST(AdmissionGate, ConcurrentEntriesNeverPassTheLimit) {
  openai::AdmissionGate gate;
  std::atomic<int> admitted{0};
  std::vector<std::shared_ptr<void>> tickets(300);
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (size_t i = 0; i < tickets.size(); ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      tickets[i] = gate.try_enter(/*engine_waiting=*/10, /*max_waiting=*/256);
      if (tickets[i]) ++admitted;
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 246);
  EXPECT_EQ(gate.entering(), 246u);
  tickets.clear();
  EXPECT_EQ(gate.entering(), 0u);
  EXPECT_NE(gate.try_enter(0, 0), nullptr);  // 0: no limit
}

// A client that leaves before its request ran skips the work; one that leaves after it was
// submitted cancels it.
TEST(DeferredHook, RunsTheHandlersHookWhenTheClientLeavesAtAnyTime) {
  int calls = 0;
  auto before = std::make_shared<openai::DeferredHook>();
  DisconnectHook leave = openai::DeferredHook::make(before);
  leave();
  EXPECT_FALSE(before->wanted());
  before->set([&] { ++calls; });  // the handler ran anyway: its hook runs at once
  EXPECT_EQ(calls, 1);
  auto after = std::make_shared<openai::DeferredHook>();
  after->set([&] { ++calls; });
  EXPECT_EQ(calls, 1);
  openai::DeferredHook::make(after)();
  EXPECT_EQ(calls, 2);
}

TEST_F(ServiceTest, JsonWithNulOrUnpairedSurrogatesIsRefused) {
  script("Hello there");
  const std::string ok = R"({"prompt":"hi","max_tokens":2})";
  EXPECT_EQ(post("/v1/completions", ok)->status(), 200);
  for (const std::string& body :
       {ok + std::string(1, '\0') + "garbage", std::string(R"({"prompt":"\udc00","max_tokens":2})"),
        std::string(R"({"prompt":"\ud800","max_tokens":2})"), std::string(R"({"prompt":"a\udfffb","max_tokens":2})"),
        std::string(R"({"prompt":"\ud800\ud800","max_tokens":2})"), std::string(R"({"\udc00":1,"prompt":"hi"})")}) {
    auto r = post("/v1/completions", body);
    EXPECT_EQ(r->status(), 400) << body;
    EXPECT_NE(r->body().find("Invalid JSON body"), std::string::npos) << r->body();
  }
  // A proper pair is one code point (U+1F600).
  EXPECT_EQ(post("/v1/completions", R"({"prompt":"\ud83d\ude00","max_tokens":2})")->status(), 200);
  EXPECT_EQ(engine_.submitted().size(), 2u);
}

TEST_F(ServiceTest, ToolCallArgumentsThatAreNotAnObjectNameTheField) {
  auto r = post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"q"},{"role":"assistant",
      "tool_calls":[{"type":"function","function":{"name":"f","arguments":"[1]"}}]}]})");
  EXPECT_EQ(r->status(), 400);
  EXPECT_NE(r->body().find("messages[1].tool_calls[0].function.arguments must be a JSON object"), std::string::npos)
      << r->body();
  EXPECT_EQ(r->body().find("chat template"), std::string::npos) << r->body();
}

}  // namespace
}  // namespace ds::test
