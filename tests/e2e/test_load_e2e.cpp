// The serving engine under load, end to end (`deltaserve serve`, 2 CPU workers, real HTTP):
//  - concurrency: many concurrent greedy requests of mixed prompt lengths (batching, chunked
//    prefill and queuing all happen) return exactly what each returns when run alone;
//  - admission control: with a tiny --max-queue, an overload is shed with prompt 429s
//    (Retry-After) while every accepted request still completes correctly;
//  - cancellation storm: clients that vanish while queued, mid-prefill or mid-decode leave
//    nothing behind (the /metrics gauges return to idle: no running or waiting request, no KV
//    block or GDN slot in use).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <rapidjson/document.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "tests/e2e/server_process.h"
#include "tests/testutil/reference.h"
#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

using Clock = std::chrono::steady_clock;

std::string ids_json(const std::vector<int32_t>& ids, size_t n) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < n; ++i) s << (i ? "," : "") << ids[i];
  s << "]";
  return s.str();
}

// A greedy completion of the first `prompt_len` tokens of the rand_1500 fixture.
std::string completion_body(size_t prompt_len, uint32_t max_tokens, bool stream = false) {
  static const ReferencePrompt ref = load_reference_prompt("rand_1500");
  return R"({"prompt": )" + ids_json(ref.ids, prompt_len) + R"(, "max_tokens": )" + std::to_string(max_tokens) +
         R"(, "temperature": 0, "ignore_eos": true)" + (stream ? R"(, "stream": true)" : "") + "}";
}

// choices[0].text and usage.completion_tokens of a 200 reply ("" on anything else).
std::string text_of(const HttpReply& r) {
  if (r.status != 200) return "";
  rapidjson::Document d;
  d.Parse(r.body.c_str());
  if (d.HasParseError() || !d.IsObject() || !d.HasMember("choices") || d["choices"].Empty()) return "";
  const auto& c = d["choices"][0];
  std::string out = c["text"].IsString() ? c["text"].GetString() : "";
  out += "|" + std::string(c["finish_reason"].IsString() ? c["finish_reason"].GetString() : "null");
  out += "|" + std::to_string(d["usage"]["completion_tokens"].GetUint());
  return out;
}

// Prometheus samples without labels, by name.
std::map<std::string, double> metrics(int port) {
  std::map<std::string, double> out;
  const HttpReply r = http_request(port, "GET", "/metrics", "");
  std::istringstream lines(r.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.find('{') != std::string::npos) continue;
    const size_t sp = line.find(' ');
    if (sp != std::string::npos) out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

// Polls /metrics until the engine holds nothing; returns the last sample.
std::map<std::string, double> wait_idle(int port, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  std::map<std::string, double> m;
  for (;;) {
    m = metrics(port);
    const bool idle = m["deltaserve:num_requests_running"] == 0 && m["deltaserve:num_requests_waiting"] == 0 &&
                      m["deltaserve:kv_blocks_used"] == 0 && m["deltaserve:gdn_slots_used"] == 0;
    if (idle || Clock::now() > deadline) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Sends a request and hangs up abruptly (RST) once `received` bytes of reply arrived (0: right
// after sending) or `after` passed, whichever comes first.
void hang_up(int port, const std::string& body, size_t received, std::chrono::milliseconds after) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  const auto deadline = Clock::now() + after;
  size_t got = 0;
  char buf[4096];
  while (received > 0 && got < received && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (received == 0) std::this_thread::sleep_for(after);
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

class LoadE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--model", tiny_model_path(), "--workers", "2", "--port", "0", "--threads", "1",
                                 "--max-seqs", "8", "--max-batch-tokens", "256"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static ServerProcess* server_;
};
ServerProcess* LoadE2E::server_ = nullptr;

TEST_F(LoadE2E, ConcurrentRequestsMatchAloneRuns) {
  const int port = server_->port();
  std::vector<std::string> bodies;
  for (int i = 0; i < 16; ++i) {
    const size_t len = 5 + static_cast<size_t>(i * 37 % 596);            // 5..600, mixed order
    const uint32_t max_tokens = 8 + static_cast<uint32_t>(i * 13 % 41);  // 8..48
    bodies.push_back(completion_body(len, max_tokens));
  }
  std::vector<std::string> alone;
  for (const std::string& b : bodies) {
    alone.push_back(text_of(http_request(port, "POST", "/v1/completions", b)));
    ASSERT_FALSE(alone.back().empty());
  }
  std::vector<HttpReply> together(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] { together[i] = http_request(port, "POST", "/v1/completions", bodies[i]); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < bodies.size(); ++i) {
    EXPECT_EQ(together[i].status, 200) << together[i].body;
    EXPECT_EQ(text_of(together[i]), alone[i]) << "request " << i;
  }
  const auto m = wait_idle(port, std::chrono::seconds(5));
  EXPECT_EQ(m.at("deltaserve:kv_blocks_used"), 0);
  EXPECT_GT(m.at("deltaserve:kv_blocks_total"), 0);
}

TEST_F(LoadE2E, CancellationStormLeavesNothingBehind) {
  const int port = server_->port();
  const auto before = metrics(port);
  std::vector<std::thread> clients;
  for (int i = 0; i < 24; ++i) {
    clients.emplace_back([port, i] {
      switch (i % 4) {
        case 0:  // long prompt: gone mid-prefill
          hang_up(port, completion_body(1400, 500, true), 0, std::chrono::milliseconds(30 + 10 * i));
          break;
        case 1:  // gone mid-decode, after a few events
          hang_up(port, completion_body(40 + static_cast<size_t>(i), 500, true), 3000, std::chrono::milliseconds(3000));
          break;
        case 2:  // gone while queued behind the others
          hang_up(port, completion_body(300, 500, true), 0, std::chrono::milliseconds(1));
          break;
        default:  // gone right after the first event
          hang_up(port, completion_body(120, 500, true), 1, std::chrono::milliseconds(3000));
          break;
      }
    });
  }
  for (auto& t : clients) t.join();
  const auto m = wait_idle(port, std::chrono::seconds(10));
  EXPECT_EQ(m.at("deltaserve:num_requests_running"), 0);
  EXPECT_EQ(m.at("deltaserve:num_requests_waiting"), 0);
  EXPECT_EQ(m.at("deltaserve:kv_blocks_used"), 0);
  EXPECT_EQ(m.at("deltaserve:gdn_slots_used"), 0);
  EXPECT_EQ(m.at("deltaserve:workers_up"), before.at("deltaserve:workers_up"));
  // The storm really reached the engine: prompts were prefilled and tokens streamed, and the
  // aborted requests were counted as such.
  EXPECT_GT(m.at("deltaserve:prompt_tokens_total"), before.at("deltaserve:prompt_tokens_total"));
  EXPECT_GT(m.at("deltaserve:generation_tokens_total"), before.at("deltaserve:generation_tokens_total") + 6);
  const std::string text = http_request(port, "GET", "/metrics", "").body;
  EXPECT_NE(text.find("deltaserve:request_success_total{finished_reason=\"abort\"}"), std::string::npos) << text;
  std::cerr << "storm: " << m.at("deltaserve:prompt_tokens_total") - before.at("deltaserve:prompt_tokens_total")
            << " prompt tokens, "
            << m.at("deltaserve:generation_tokens_total") - before.at("deltaserve:generation_tokens_total")
            << " generated tokens before the clients vanished\n";
  // The server still serves, with its memory intact.
  const std::string body = completion_body(50, 8);
  const HttpReply r = http_request(port, "POST", "/v1/completions", body);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(text_of(r).empty());
}

TEST(OverloadE2E, FullQueueIsShedWith429AndAcceptedRequestsComplete) {
  ServerProcess server({"--model", tiny_model_path(), "--workers", "2", "--port", "0", "--threads", "1", "--max-seqs",
                        "2", "--max-queue", "4"});
  const int port = server.port();
  std::vector<std::string> bodies;
  for (size_t k = 0; k < 4; ++k) bodies.push_back(completion_body(20 + 30 * k, 16));
  std::vector<std::string> alone;
  for (const std::string& b : bodies) alone.push_back(text_of(http_request(port, "POST", "/v1/completions", b)));

  constexpr int kRequests = 40;
  std::vector<HttpReply> replies(kRequests);
  std::vector<double> seconds(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      const auto t0 = Clock::now();
      replies[i] = http_request(port, "POST", "/v1/completions", bodies[i % 4]);
      seconds[i] = std::chrono::duration<double>(Clock::now() - t0).count();
    });
  }
  for (auto& t : threads) t.join();
  int ok = 0, shed = 0;
  for (int i = 0; i < kRequests; ++i) {
    if (replies[i].status == 200) {
      ++ok;
      EXPECT_EQ(text_of(replies[i]), alone[i % 4]) << "request " << i;
    } else if (replies[i].status == 429) {
      ++shed;
      EXPECT_EQ(replies[i].headers["retry-after"], "1");
      rapidjson::Document d;
      d.Parse(replies[i].body.c_str());
      ASSERT_TRUE(d.IsObject() && d.HasMember("error")) << replies[i].body;
      EXPECT_STREQ(d["error"]["type"].GetString(), "rate_limit_error");
      EXPECT_LT(seconds[i], 5.0) << "a shed request is answered without waiting for the engine";
    } else {
      ADD_FAILURE() << "request " << i << ": " << replies[i].status << " " << replies[i].body;
    }
  }
  double slowest_429 = 0;
  for (int i = 0; i < kRequests; ++i) {
    if (replies[i].status == 429) slowest_429 = std::max(slowest_429, seconds[i]);
  }
  std::cerr << "overload: " << ok << " accepted, " << shed << " shed with 429 (slowest 429 after " << slowest_429 * 1e3
            << " ms)\n";
  EXPECT_EQ(ok + shed, kRequests);
  EXPECT_GT(shed, 0) << "40 requests at once must overflow a queue of 4";
  EXPECT_GE(ok, 4) << "the first 4 always find room in the queue";
  const auto m = wait_idle(port, std::chrono::seconds(5));
  EXPECT_EQ(m.at("deltaserve:num_requests_waiting"), 0);
  EXPECT_EQ(m.at("deltaserve:kv_blocks_used"), 0);
}

}  // namespace
}  // namespace ds::test
