// Serving paths that must not change a single token (CPU workers, real HTTP):
//  - prefill pipelining in BatchEngine (--pipeline-depth): a long prompt's chunk plans go out
//    several at a time over 2 and 3 workers, greedy tokens bit-identical to one plan at a time,
//    also with concurrent requests and with a worker SIGKILLed while the chunks are in flight;
//  - decode groups (--decode-groups 2): the running sequences decode in two plans that take
//    turns in flight, tokens identical to one group, also with a worker SIGKILLed mid-decode;
//  - --hidden-transport inline and --early-handoff off give the default server's tokens.
// Tokens are compared by id (logprobs.tokens) and text; temperature 0 with ignore_eos so every
// request runs its full length.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "tests/e2e/completion_reply.h"
#include "tests/e2e/server_process.h"
#include "tests/testutil/reference.h"
#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<HttpReply> post_concurrently(int port, const std::vector<std::string>& bodies) {
  std::vector<HttpReply> out(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = post_completion(port, bodies[i]); });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Posts `bodies` concurrently to the `want` server, then to the `got` one: every reply must be
// 200 and the same completion, token for token.
void expect_same_completions(int want_port, int got_port, const std::vector<std::string>& bodies) {
  const std::vector<HttpReply> want = post_concurrently(want_port, bodies);
  const std::vector<HttpReply> got = post_concurrently(got_port, bodies);
  for (size_t i = 0; i < bodies.size(); ++i) {
    ASSERT_EQ(want[i].status, 200) << want[i].body;
    EXPECT_EQ(completion_outcome(got[i]), completion_outcome(want[i])) << "request " << i;
  }
}

std::vector<std::string> server_args(const std::string& workers, std::vector<std::string> extra) {
  std::vector<std::string> a{"--model", tiny_model_path(), "--workers", workers,      "--port",
                             "0",       "--threads",       "1",         "--max-seqs", "8"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

constexpr const char* kPipelinedNote = "plans in flight at once";

// ---- prefill pipelining (--pipeline-depth) --------------------------------------------------

// Small token budgets cut the prompts into many chunk plans: rand_1500 is 47 plans of 32.
class PipelineE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::vector<std::string> small_steps{"--max-batch-tokens", "32"};
    std::vector<std::string> sequential = small_steps, pipelined = small_steps;
    sequential.insert(sequential.end(), {"--pipeline-depth", "1"});
    pipelined.insert(pipelined.end(), {"--pipeline-depth", "4"});
    sequential_ = new ServerProcess(server_args("3", sequential));
    three_ = new ServerProcess(server_args("3", pipelined));
    two_ = new ServerProcess(server_args("2", {"--max-batch-tokens", "32"}));  // default depth: 3
  }
  static void TearDownTestSuite() { stop_servers({&sequential_, &three_, &two_}); }
  static ServerProcess* sequential_;
  static ServerProcess* three_;
  static ServerProcess* two_;
};
ServerProcess* PipelineE2E::sequential_ = nullptr;
ServerProcess* PipelineE2E::three_ = nullptr;
ServerProcess* PipelineE2E::two_ = nullptr;

TEST_F(PipelineE2E, LongPromptsGiveTheSequentialTokens) {
  const std::vector<int32_t> ids = load_reference_prompt("rand_1500").ids;
  for (size_t len : {size_t{1}, size_t{31}, size_t{33}, size_t{200}, ids.size()}) {
    const std::string body = greedy_completion_body(ids, len, 12);
    const HttpReply want = post_completion(sequential_->port(), body);
    ASSERT_EQ(want.status, 200) << want.body;
    EXPECT_EQ(completion_outcome(post_completion(three_->port(), body)), completion_outcome(want)) << len;
    EXPECT_EQ(completion_outcome(post_completion(two_->port(), body)), completion_outcome(want)) << len;
  }
  // The pipelined path really ran (and the sequential server never took it).
  EXPECT_NE(three_->log().find(kPipelinedNote), std::string::npos) << three_->log();
  EXPECT_NE(two_->log().find(kPipelinedNote), std::string::npos) << two_->log();
  EXPECT_EQ(sequential_->log().find(kPipelinedNote), std::string::npos);
}

// Prefill-only windows form between other requests' decode steps, admissions and releases.
TEST_F(PipelineE2E, ConcurrentRequestsGiveTheSequentialTokens) {
  const std::vector<int32_t> ids = load_reference_prompt("rand_1500").ids;
  std::vector<std::string> bodies;
  for (int i = 0; i < 10; ++i) {
    const size_t len = 3 + static_cast<size_t>(i * 131 % 700);          // 3..700, mixed order
    const uint32_t max_tokens = 4 + static_cast<uint32_t>(i * 7 % 13);  // 4..16
    bodies.push_back(greedy_completion_body(ids, len, max_tokens));
  }
  expect_same_completions(sequential_->port(), three_->port(), bodies);
}

// A worker SIGKILLed while a long prompt's chunks are in flight: the engine recovers (the
// restarted worker, every live sequence re-prefilled) and the stream carries the same text.
// The prompt is one no other test sends (no prefix-cache hit shortens its prefill); the kill
// lands at a quarter of the sequential server's time to first token for it (the pipelined
// server is at most ~2x faster on CI's cores), and the test checks no token had come by then.
TEST_F(PipelineE2E, WorkerKilledMidPipelinedPrefillGivesTheSameTokens) {
  std::vector<int32_t> ids = load_reference_prompt("rand_1500").ids;
  std::reverse(ids.begin(), ids.end());
  const std::string body = greedy_completion_body(ids, ids.size(), 8, true);
  const auto t0 = Clock::now();
  std::atomic<int64_t> ttft_ms{-1};
  const HttpReply clean =
      http_request(sequential_->port(), "POST", "/v1/completions", body, {}, [&](const std::string& so_far) {
        if (ttft_ms < 0 && !streamed_completion_text(so_far).empty()) {
          ttft_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
        }
      });
  ASSERT_EQ(clean.status, 200) << clean.body;
  ASSERT_GT(ttft_ms.load(), 0);
  const std::string want = streamed_completion_text(clean.body);

  std::atomic<bool> token_seen{false}, token_before_kill{false};
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ttft_ms / 4));
    token_before_kill = token_seen.load();
    kill(three_->worker_pids().at(1), SIGKILL);
  });
  const HttpReply crashed =
      http_request(three_->port(), "POST", "/v1/completions", body, {}, [&](const std::string& so_far) {
        if (!streamed_completion_text(so_far).empty()) token_seen = true;
      });
  killer.join();
  ASSERT_EQ(crashed.status, 200) << crashed.body;
  EXPECT_FALSE(token_before_kill.load()) << "the kill came after the prefill (time to first token " << ttft_ms
                                         << " ms)";
  EXPECT_EQ(streamed_completion_text(crashed.body), want);
  EXPECT_NE(three_->log().find("worker rank 1 pid"), std::string::npos) << "the supervisor saw the kill";
  EXPECT_EQ(http_request(three_->port(), "GET", "/ready", "").status, 200);
  // Served again after the recovery, still the sequential tokens.
  const std::string after = greedy_completion_body(ids, 300, 6);
  EXPECT_EQ(completion_outcome(post_completion(three_->port(), after)),
            completion_outcome(post_completion(sequential_->port(), after)));
}

// ---- decode groups (--decode-groups) ---------------------------------------------------------

class DecodeGroupsE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    one_ = new ServerProcess(server_args("2", {"--decode-groups", "1", "--pipeline-depth", "1"}));
    two_ = new ServerProcess(server_args("2", {"--decode-groups", "2"}));
  }
  static void TearDownTestSuite() { stop_servers({&one_, &two_}); }
  // Mixed prompt lengths and output lengths: sequences join and leave the groups while the
  // others decode.
  static std::vector<std::string> bodies(bool stream) {
    const std::vector<int32_t> ids = load_reference_prompt("rand_200").ids;
    std::vector<std::string> out;
    for (int i = 0; i < 8; ++i) {
      const size_t len = 2 + static_cast<size_t>(i * 37 % 190);
      out.push_back(greedy_completion_body(ids, len, 40 + static_cast<uint32_t>(i * 11 % 23), stream));
    }
    return out;
  }
  static ServerProcess* one_;
  static ServerProcess* two_;
};
ServerProcess* DecodeGroupsE2E::one_ = nullptr;
ServerProcess* DecodeGroupsE2E::two_ = nullptr;

TEST_F(DecodeGroupsE2E, ConcurrentRequestsGiveTheOneGroupTokens) {
  const std::vector<std::string> b = bodies(false);
  expect_same_completions(one_->port(), two_->port(), b);
  EXPECT_NE(two_->log().find("decode_groups=2"), std::string::npos) << "the option reached the engine";
  EXPECT_NE(two_->log().find(kPipelinedNote), std::string::npos) << two_->log();
  EXPECT_EQ(one_->log().find(kPipelinedNote), std::string::npos);
  // Every token took a step; the loop's time splits into host work and waiting.
  EXPECT_GE(metric_value(two_->port(), "deltaserve:engine_steps_total"), 40.0);
  EXPECT_GT(metric_value(two_->port(), "deltaserve:engine_host_seconds_total"), 0.0);
  EXPECT_GT(metric_value(two_->port(), "deltaserve:engine_wait_seconds_total"), 0.0);
}

// A worker SIGKILLed while both groups decode: every stream completes with the text it has on
// the one-group server (the engine forgets both plans in flight and re-prefills everything).
TEST_F(DecodeGroupsE2E, WorkerKilledMidDecodeGivesTheSameTokens) {
  const std::vector<std::string> b = bodies(true);
  std::vector<std::string> want;
  for (const HttpReply& r : post_concurrently(one_->port(), b)) {
    ASSERT_EQ(r.status, 200) << r.body;
    want.push_back(streamed_completion_text(r.body));
  }
  std::atomic<int> streaming{0}, done{0};
  std::vector<HttpReply> got(b.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < b.size(); ++i) {
    clients.emplace_back([&, i] {
      bool counted = false;
      got[i] = http_request(two_->port(), "POST", "/v1/completions", b[i], {}, [&](const std::string& so_far) {
        if (!counted && !streamed_completion_text(so_far).empty()) {
          counted = true;
          ++streaming;
        }
      });
      ++done;
    });
  }
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (streaming < 4 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int streaming_at_kill = streaming, done_at_kill = done;
  kill(two_->worker_pids().at(1), SIGKILL);
  for (auto& c : clients) c.join();
  EXPECT_GE(streaming_at_kill, 4) << "the kill came before the streams started decoding";
  EXPECT_LT(done_at_kill, 8) << "the kill came after every stream had ended";
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_EQ(got[i].status, 200) << got[i].body;
    EXPECT_EQ(streamed_completion_text(got[i].body), want[i]) << "request " << i;
  }
  EXPECT_NE(two_->log().find("worker rank 1 lost"), std::string::npos) << "the engine saw the kill";
  EXPECT_EQ(http_request(two_->port(), "GET", "/ready", "").status, 200);
}

// ---- --hidden-transport inline, --early-handoff off ------------------------------------------

class TransportE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    default_ = new ServerProcess(server_args("2", {}));
    inline_ = new ServerProcess(server_args("2", {"--hidden-transport", "inline"}));
    // The ring's hand-off after the rows land (--early-handoff off): the default hands over first.
    late_ = new ServerProcess(server_args("2", {"--early-handoff", "off"}));
  }
  static void TearDownTestSuite() { stop_servers({&default_, &inline_, &late_}); }
  static ServerProcess* default_;
  static ServerProcess* inline_;
  static ServerProcess* late_;
};
ServerProcess* TransportE2E::default_ = nullptr;
ServerProcess* TransportE2E::inline_ = nullptr;
ServerProcess* TransportE2E::late_ = nullptr;

TEST_F(TransportE2E, InlineHiddenStatesGiveTheDefaultTokens) {
  const std::vector<int32_t> ids = load_reference_prompt("rand_200").ids;
  const std::string body = greedy_completion_body(ids, ids.size(), 16);
  const HttpReply want = post_completion(default_->port(), body);
  ASSERT_EQ(want.status, 200) << want.body;
  EXPECT_EQ(completion_outcome(post_completion(inline_->port(), body)), completion_outcome(want));
  EXPECT_NE(inline_->log().find("hidden_transport=inline"), std::string::npos) << "the option reached the engine";
}

// Several sequences per step, their hidden states handed over after the rows land.
TEST_F(TransportE2E, LateHandoffGivesTheDefaultTokens) {
  const std::vector<int32_t> ids = load_reference_prompt("rand_200").ids;
  std::vector<std::string> bodies;
  for (size_t len : {5, 40, 90, 200}) bodies.push_back(greedy_completion_body(ids, len, 10));
  expect_same_completions(default_->port(), late_->port(), bodies);
  EXPECT_NE(late_->log().find("early_handoff=off"), std::string::npos) << "the option reached the workers";
  EXPECT_NE(default_->log().find("early_handoff=on"), std::string::npos);
}

}  // namespace
}  // namespace ds::test
