// Operations end to end: `--log-format json` gives one parseable JSON object per stderr line
// (coordinator and workers alike, request lines carrying the request id), and SIGTERM while
// several streams are in flight drains them: every stream ends with `data: [DONE]`, the
// coordinator exits 0 and its workers are gone.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/e2e/server_process.h"
#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

// Gone: no such process, or a zombie nobody reaped yet.
bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

bool wait_gone(pid_t pid, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 50) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return process_gone(pid);
}

// Concatenated `choices[0].text` of a streamed completion and its finish reason; "" on a bad event.
std::pair<std::string, std::string> streamed_text(const std::string& body) {
  std::string text, finish;
  for (const std::string& e : sse_events(body)) {
    if (e == "[DONE]") continue;
    rapidjson::Document d;
    d.Parse(e.c_str());
    if (d.HasParseError() || !d.IsObject()) return {"", "bad event: " + e};
    if (!d.HasMember("choices") || !d["choices"].IsArray() || d["choices"].Empty()) continue;
    const auto& c = d["choices"][0];
    if (c.HasMember("text") && c["text"].IsString()) text += c["text"].GetString();
    if (c.HasMember("finish_reason") && c["finish_reason"].IsString()) finish = c["finish_reason"].GetString();
  }
  return {text, finish};
}

TEST(OpsE2E, JsonLogLinesParse) {
  ServerProcess server({"--model", tiny_model_path(), "--workers", "2", "--port", "0", "--log-format", "json"});
  const HttpReply r = http_request(server.port(), "POST", "/v1/completions",
                                   R"({"prompt": "Hello", "max_tokens": 3, "temperature": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(server.terminate(15000), 0) << server.log();

  std::istringstream lines(server.log());
  std::string line;
  int n = 0, worker_lines = 0, request_lines = 0;
  bool listening = false;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    ++n;
    rapidjson::Document d;
    d.Parse<rapidjson::kParseValidateEncodingFlag>(line.c_str());
    ASSERT_FALSE(d.HasParseError()) << "not JSON: " << line;
    ASSERT_TRUE(d.IsObject()) << line;
    for (const char* key : {"ts", "level", "proc", "rank", "msg", "request_id"}) {
      ASSERT_TRUE(d.HasMember(key)) << key << " missing: " << line;
    }
    ASSERT_TRUE(d["ts"].IsString() && d["level"].IsString() && d["proc"].IsString() && d["msg"].IsString()) << line;
    const std::string proc = d["proc"].GetString();
    const std::string msg = d["msg"].GetString();
    if (proc == "worker") {
      ++worker_lines;
      EXPECT_TRUE(d["rank"].IsInt()) << line;
    } else {
      EXPECT_EQ(proc, "coordinator") << line;
      EXPECT_TRUE(d["rank"].IsNull()) << line;
    }
    if (msg.rfind("listening on http://", 0) == 0) listening = true;
    if (msg.rfind("request finished", 0) == 0) {
      ++request_lines;
      ASSERT_TRUE(d["request_id"].IsString()) << line;
      EXPECT_EQ(std::string(d["request_id"].GetString()).rfind("cmpl-", 0), 0u) << line;
    }
  }
  EXPECT_GT(n, 5);
  EXPECT_GE(worker_lines, 2) << "both workers log in JSON too";
  EXPECT_TRUE(listening);
  EXPECT_EQ(request_lines, 1);
}

TEST(OpsE2E, SigtermDrainsInFlightStreams) {
  ServerProcess server({"--model", tiny_model_path(), "--workers", "2", "--port", "0", "--threads", "1"});
  const std::map<int, pid_t> workers = server.worker_pids();
  ASSERT_EQ(workers.size(), 2u);
  constexpr int kStreams = 4;
  std::atomic<int> streaming{0};
  std::vector<HttpReply> replies(kStreams);
  std::vector<std::string> errors(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      bool counted = false;
      const std::string body = R"({"prompt": "Once upon a time )" + std::to_string(i) +
                               R"(", "max_tokens": 200, "temperature": 0, "stream": true})";
      try {
        replies[i] = http_request(server.port(), "POST", "/v1/completions", body, {}, [&](const std::string& so_far) {
          if (!counted && sse_events(so_far).size() >= 2) {
            counted = true;
            ++streaming;
          }
        });
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      if (!counted) ++streaming;  // ended (or failed) before two events: do not hold SIGTERM back
    });
  }
  for (int waited = 0; streaming < kStreams && waited < 30000; waited += 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int rc = server.terminate(40000);
  for (auto& t : clients) t.join();
  EXPECT_EQ(rc, 0) << server.log();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(errors[i].empty()) << "stream " << i << ": " << errors[i];
    EXPECT_EQ(replies[i].status, 200) << replies[i].body;
    const std::vector<std::string> events = sse_events(replies[i].body);
    ASSERT_FALSE(events.empty()) << "stream " << i;
    EXPECT_EQ(events.back(), "[DONE]") << "stream " << i << " did not end cleanly:\n" << replies[i].body;
    for (size_t e = 0; e + 1 < events.size(); ++e) {
      rapidjson::Document d;
      d.Parse(events[e].c_str());
      EXPECT_FALSE(d.HasParseError()) << events[e];
    }
  }
  for (const auto& [rank, pid] : workers) EXPECT_TRUE(wait_gone(pid, 5000)) << "worker rank " << rank << " pid " << pid;
}

// Several streams in flight while one worker is SIGKILLed: every stream completes with the
// tokens of an undisturbed run, the killed rank gets a new process and the other keeps its own.
TEST(OpsE2E, WorkerKilledUnderConcurrentStreams) {
  ServerProcess server({"--model", tiny_model_path(), "--workers", "2", "--port", "0", "--threads", "1"});
  const pid_t victim = server.worker_pids().at(1);
  const pid_t survivor = server.worker_pids().at(0);
  constexpr int kStreams = 3;
  auto body = [](int i) {
    return R"({"prompt": "Tell me a story number )" + std::to_string(i) +
           R"(", "max_tokens": 48, "temperature": 0, "stream": true})";
  };
  auto run_all = [&](bool kill_worker) {
    std::vector<HttpReply> replies(kStreams);
    std::atomic<bool> killed{false};
    std::vector<std::thread> clients;
    for (int i = 0; i < kStreams; ++i) {
      clients.emplace_back([&, i] {
        replies[i] =
            http_request(server.port(), "POST", "/v1/completions", body(i), {}, [&](const std::string& so_far) {
              if (kill_worker && i == 0 && !killed && sse_events(so_far).size() >= 6) {
                kill(victim, SIGKILL);
                killed = true;
              }
            });
      });
    }
    for (auto& t : clients) t.join();
    if (kill_worker) {
      EXPECT_TRUE(killed) << "the stream ended before the worker could be killed";
    }
    return replies;
  };
  const std::vector<HttpReply> clean = run_all(false);
  const std::vector<HttpReply> crashed = run_all(true);
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_EQ(clean[i].status, 200);
    ASSERT_EQ(crashed[i].status, 200);
    const auto [want, want_finish] = streamed_text(clean[i].body);
    const auto [got, got_finish] = streamed_text(crashed[i].body);
    EXPECT_EQ(got, want) << "stream " << i;
    EXPECT_EQ(got_finish, want_finish) << "stream " << i;
    EXPECT_EQ(sse_events(crashed[i].body).back(), "[DONE]") << "stream " << i;
  }
  EXPECT_TRUE(wait_gone(victim, 5000));
  EXPECT_EQ(kill(survivor, 0), 0) << "the healthy worker must not be restarted";
  for (int waited = 0; waited < 20000; waited += 100) {
    if (http_request(server.port(), "GET", "/ready", "").status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The supervisor's last start of rank 1 is a new process; rank 0 was started once.
  const std::string text = server.log();
  EXPECT_NE(text.find("started worker rank 1 pid "), text.rfind("started worker rank 1 pid ")) << text;
  EXPECT_EQ(text.find("started worker rank 0 pid "), text.rfind("started worker rank 0 pid ")) << text;
  EXPECT_EQ(server.terminate(15000), 0) << server.log();
}

}  // namespace
}  // namespace ds::test
