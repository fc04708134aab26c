// The whole system on CPU workers: GGUF -> tokenizer / chat template -> coordinator ->
// continuous-batching engine -> 2 worker processes over ZeroMQ -> HTTP, checked against the
// independent reference (greedy tokens of the fixture), including a worker SIGKILLed in the
// middle of a streamed generation.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <signal.h>

#include <sstream>

#include "coordinator/tokenizer/tokenizer.h"
#include "tests/e2e/server_process.h"
#include "tests/testutil/reference.h"
#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

rapidjson::Document parse(const std::string& body) {
  rapidjson::Document d;
  d.Parse(body.c_str());
  EXPECT_FALSE(d.HasParseError()) << body;
  return d;
}

// Concatenated `choices[0].text` of a streamed completion, and its finish reason.
std::pair<std::string, std::string> streamed_text(const std::string& body) {
  std::string text, finish;
  for (const std::string& e : sse_events(body)) {
    if (e == "[DONE]") continue;
    rapidjson::Document d = parse(e);
    if (!d.HasMember("choices") || d["choices"].Empty()) continue;
    const auto& c = d["choices"][0];
    if (c.HasMember("text") && c["text"].IsString()) text += c["text"].GetString();
    if (c.HasMember("finish_reason") && c["finish_reason"].IsString()) finish = c["finish_reason"].GetString();
  }
  return {text, finish};
}

class ServeE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--model", tiny_model_path(), "--workers", "2", "--port", "0", "--threads", "1"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static ServerProcess* server_;
};
ServerProcess* ServeE2E::server_ = nullptr;

TEST_F(ServeE2E, GreedyCompletionMatchesReference) {
  const ReferencePrompt ref = load_reference_prompt("chat_basic");
  const Tokenizer tok = Tokenizer::from_file(tiny_model_path());
  const std::string body = R"({"prompt": )" + ids_json(ref.ids) + R"(, "max_tokens": 32, "temperature": 0})";
  const HttpReply r = http_request(server_->port(), "POST", "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  rapidjson::Document d = parse(r.body);
  EXPECT_EQ(std::string(d["choices"][0]["text"].GetString()), tok.decode(ref.greedy_tokens, false));
  EXPECT_STREQ(d["choices"][0]["finish_reason"].GetString(), "length");
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetInt(), 19);
  EXPECT_EQ(d["usage"]["completion_tokens"].GetInt(), 32);
}

TEST_F(ServeE2E, ChatTemplateProducesTheReferencePrompt) {
  const HttpReply r =
      http_request(server_->port(), "POST", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "Hello! What is the capital of Korea?"}],
                                       "max_tokens": 4, "temperature": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  rapidjson::Document d = parse(r.body);
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetInt(), 19);  // the fixture's chat_basic ids
  EXPECT_STREQ(d["object"].GetString(), "chat.completion");
  EXPECT_STREQ(d["choices"][0]["message"]["role"].GetString(), "assistant");
}

TEST_F(ServeE2E, WorkerKilledMidStreamGivesTheSameTokens) {
  const ReferencePrompt ref = load_reference_prompt("rand_200");
  const std::string body =
      R"({"prompt": )" + ids_json(ref.ids) + R"(, "max_tokens": 64, "temperature": 0, "stream": true})";
  const HttpReply clean = http_request(server_->port(), "POST", "/v1/completions", body);
  ASSERT_EQ(clean.status, 200);
  const auto [want, want_finish] = streamed_text(clean.body);
  ASSERT_EQ(want_finish, "length");

  const pid_t victim = server_->worker_pids().at(1);
  const pid_t survivor = server_->worker_pids().at(0);
  bool killed = false;
  const HttpReply crashed =
      http_request(server_->port(), "POST", "/v1/completions", body, {}, [&](const std::string& so_far) {
        if (!killed && sse_events(so_far).size() >= 8) {
          kill(victim, SIGKILL);
          killed = true;
        }
      });
  ASSERT_TRUE(killed) << "the stream ended before the worker could be killed";
  ASSERT_EQ(crashed.status, 200);
  const auto [got, got_finish] = streamed_text(crashed.body);
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_finish, "length");
  EXPECT_EQ(kill(survivor, 0), 0) << "the healthy worker must not be restarted";
  const HttpReply ready = http_request(server_->port(), "GET", "/ready", "");
  EXPECT_EQ(ready.status, 200) << ready.body;
}

TEST_F(ServeE2E, BadRequestsGetOpenAIErrors) {
  HttpReply r = http_request(server_->port(), "POST", "/v1/chat/completions", "{not json");
  EXPECT_EQ(r.status, 400);
  rapidjson::Document d = parse(r.body);
  ASSERT_TRUE(d.HasMember("error")) << r.body;
  EXPECT_TRUE(d["error"].HasMember("message"));
  r = http_request(server_->port(), "POST", "/v1/chat/completions", R"({"messages": "hi"})");
  EXPECT_EQ(r.status, 400) << r.body;
  r = http_request(server_->port(), "POST", "/v1/completions", R"({"prompt": [999999999], "max_tokens": 2})");
  EXPECT_EQ(r.status, 400) << r.body;
  r = http_request(server_->port(), "GET", "/no/such/route", "");
  EXPECT_EQ(r.status, 404);
  r = http_request(server_->port(), "GET", "/health", "");
  EXPECT_EQ(r.status, 200);
  // The server still serves after all of that.
  r = http_request(server_->port(), "POST", "/v1/completions", R"({"prompt": "Hello", "max_tokens": 2})");
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(ServeE2EShutdown, SigtermExitsCleanly) {
  ServerProcess server({"--model", tiny_model_path(), "--workers", "1", "--port", "0"});
  const HttpReply r = http_request(server.port(), "GET", "/v1/models", "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(server.terminate(15000), 0) << server.log();
}

}  // namespace
}  // namespace ds::test
