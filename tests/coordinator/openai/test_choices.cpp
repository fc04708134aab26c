// n > 1 through the service on a scripted engine: one engine request per choice (choice 0
// first, the others once it started), choices[].index 0..n-1, usage summed over the choices with
// the prompt counted once, streaming chunks of every index with one usage chunk and one [DONE],
// seeds derived per choice, the cap, and a failing choice failing the reply.
#include <chrono>
#include <set>
#include <thread>

#include "coordinator/openai/submission.h"
#include "tests/coordinator/openai/service_fixture.h"

namespace ds::test {
namespace {

const std::string kChat = R"({"model":"tiny","messages":[{"role":"user","content":"hi"}])";

class ChoicesTest : public ServiceTest {};

TEST_F(ChoicesTest, ChatChoicesAreMergedWithSummedUsage) {
  script("ok.</think>\n\none two");  // the fixture's template opens a think block
  auto r = post("/v1/chat/completions", kChat + R"(,"n":3,"seed":42})");
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  ASSERT_EQ(d["choices"].Size(), 3u) << r->body();
  for (rapidjson::SizeType i = 0; i < 3; ++i) {
    EXPECT_EQ(d["choices"][i]["index"].GetUint(), i);
    EXPECT_EQ(str(d["choices"][i]["message"]["content"]), "one two");
    EXPECT_EQ(str(d["choices"][i]["message"]["reasoning_content"]), "ok.");
    EXPECT_EQ(str(d["choices"][i]["finish_reason"]), "stop");
  }
  const uint32_t per_choice = static_cast<uint32_t>(ids("ok.</think>\n\none two").size()) + 1;  // + <|im_end|>
  EXPECT_EQ(d["usage"]["completion_tokens"].GetUint(), 3 * per_choice);
  const auto reqs = engine_.submitted();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetUint(), reqs[0].prompt_ids.size());
  EXPECT_EQ(d["usage"]["total_tokens"].GetUint(), reqs[0].prompt_ids.size() + 3 * per_choice);
  std::set<std::string> request_ids;
  std::set<uint64_t> seeds;
  for (const auto& q : reqs) {
    request_ids.insert(q.request_id);
    ASSERT_TRUE(q.sampling.seed.has_value());
    seeds.insert(*q.sampling.seed);
    EXPECT_EQ(q.prompt_ids, reqs[0].prompt_ids);
  }
  EXPECT_EQ(request_ids.size(), 3u);
  EXPECT_EQ(*reqs[0].sampling.seed, 42u);  // choice 0 keeps the request's seed: n = 1 is unchanged
  EXPECT_EQ(seeds, (std::set<uint64_t>{42, openai::choice_seed(42, 1), openai::choice_seed(42, 2)}));
}

TEST_F(ChoicesTest, StreamedChoicesCarryTheirIndexAndEndOnce) {
  script("a b c", /*end_with_eog=*/false);
  auto r = post("/v1/completions",
                R"({"prompt":"hi","n":2,"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r->status(), 200);
  const auto payloads = sse_payloads(r->body());
  ASSERT_FALSE(payloads.empty());
  EXPECT_EQ(payloads.back(), "[DONE]");
  EXPECT_EQ(std::count(payloads.begin(), payloads.end(), "[DONE]"), 1);
  std::string text[2];
  int usage_chunks = 0, finishes = 0;
  for (size_t i = 0; i + 1 < payloads.size(); ++i) {
    auto d = json(payloads[i]);
    if (d["choices"].Empty()) {
      ++usage_chunks;
      EXPECT_EQ(d["usage"]["completion_tokens"].GetUint(), 2 * ids("a b c").size());
      continue;
    }
    const uint32_t index = d["choices"][0]["index"].GetUint();
    ASSERT_LT(index, 2u);
    text[index] += str(d["choices"][0]["text"]);
    if (d["choices"][0]["finish_reason"].IsString()) ++finishes;
  }
  EXPECT_EQ(usage_chunks, 1);
  EXPECT_EQ(finishes, 2);
  EXPECT_EQ(text[0], "a b c");
  EXPECT_EQ(text[1], "a b c");
}

TEST_F(ChoicesTest, TheCapAndTheRangeAre400) {
  script("unused");
  for (const char* n : {"0", "17", "129", "1.5", "\"2\""}) {
    auto r = post("/v1/chat/completions", kChat + R"(,"n":)" + std::string(n) + "}");
    EXPECT_EQ(r->status(), 400) << n;
    EXPECT_EQ(str(json(r->body())["error"]["param"]), "n") << r->body();
  }
  auto r = post("/v1/chat/completions", kChat + R"(,"n":16})");
  EXPECT_EQ(r->status(), 200) << r->body();
  EXPECT_EQ(json(r->body())["choices"].Size(), 16u);
  r = post("/v1/completions", R"({"prompt":"hi","best_of":2})");
  EXPECT_EQ(r->status(), 400);
}

TEST_F(ChoicesTest, AFailingChoiceFailsTheReply) {
  FakeScript s;
  s.tokens = ids("x");
  s.end = FinishReason::kError;
  s.error = "boom";
  engine_.set_script(s);
  auto r = post("/v1/chat/completions", kChat + R"(,"n":2})");
  EXPECT_EQ(r->status(), 500) << r->body();
  EXPECT_NE(r->body().find("boom"), std::string::npos) << r->body();
}

TEST_F(ChoicesTest, DisconnectCancelsEveryChoice) {
  FakeScript s;
  s.tokens = ids("a b c d e f g h i j k l m n o p");
  s.delay = std::chrono::milliseconds(50);
  engine_.set_script(s);
  auto channel = std::make_shared<RecordingChannel>();
  HttpRequest req{
      "POST", "/v1/chat/completions", "", {{"content-type", "application/json"}}, kChat + R"(,"n":3,"stream":true})"};
  DisconnectHook hook = service_->handler().handle(req, channel);
  ASSERT_TRUE(hook);
  // The later choices are submitted once choice 0 started.
  for (int i = 0; i < 200 && engine_.submitted().size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(engine_.submitted().size(), 3u);
  hook();
  for (const auto& q : engine_.submitted()) EXPECT_TRUE(engine_.was_cancelled(q.request_id)) << q.request_id;
}

}  // namespace
}  // namespace ds::test
