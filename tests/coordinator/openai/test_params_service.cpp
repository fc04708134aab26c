// Request parameters end to end (service + fake engine): what reaches the engine, echo,
// parallel_tool_calls, reasoning_effort and the fields accepted and ignored.
#include "tests/coordinator/openai/service_fixture.h"

namespace ds::test {
namespace {

const std::string kChat = R"({"model":"tiny","messages":[{"role":"user","content":"hi"}])";
std::string chat(const std::string& extra = "") {
  return kChat + (extra.empty() ? "" : "," + extra) + "}";
}

const std::string kTools =
    R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
    R"("properties":{"city":{"type":"string"}}}}}])";
const std::string kTwoCalls =
    "Both.</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    "</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n"
    "</tool_call>";

class ParamsTest : public ServiceTest {
 protected:
  std::vector<rapidjson::Document> chunks_of(const RecordingChannel& c) {
    EXPECT_TRUE(c.streamed());
    const auto payloads = sse_payloads(c.body());
    EXPECT_FALSE(payloads.empty());
    if (!payloads.empty()) {
      EXPECT_EQ(payloads.back(), "[DONE]");
    }
    std::vector<rapidjson::Document> out;
    for (size_t i = 0; i + 1 < payloads.size(); ++i) out.push_back(json(payloads[i]));
    return out;
  }
  // The text of a streamed completion, chunk by chunk (chunks with choices only).
  std::vector<std::string> texts_of(const RecordingChannel& c) {
    std::vector<std::string> out;
    for (const auto& d : chunks_of(c)) {
      if (!d["choices"].Empty()) out.push_back(str(d["choices"][0]["text"]));
    }
    return out;
  }
  // The prompt the engine got, as text.
  std::string last_prompt() const {
    const auto reqs = engine_.submitted();
    return reqs.empty() ? "" : tok().decode(reqs.back().prompt_ids, /*render_control=*/true);
  }
  static bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
};

TEST_F(ParamsTest, StopTokenIdsReachTheEngine) {
  script("ok");
  ASSERT_EQ(post("/v1/chat/completions", chat(R"("stop_token_ids":[5,7,5])"))->status(), 200);
  EXPECT_EQ(engine_.submitted().back().sampling.stop_token_ids, (std::vector<int32_t>{5, 7, 5}));
  const int32_t last = tok().n_vocab() - 1;
  ASSERT_EQ(post("/v1/completions", R"({"prompt":"hi","stop_token_ids":[)" + std::to_string(last) + "]}")->status(),
            200);
  EXPECT_EQ(engine_.submitted().back().sampling.stop_token_ids, (std::vector<int32_t>{last}));
}

// Structured outputs reach the engine as a constraint: one compiled grammar shared by equal
// requests (the cache), none without a constraint, the reasoning block's end with thinking on.
TEST_F(ParamsTest, OutputConstraintsReachTheEngine) {
  script("ok");
  ASSERT_EQ(post("/v1/chat/completions", chat(R"("response_format":{"type":"json_object"})"))->status(), 200);
  const auto first = engine_.submitted().back().constraint;
  ASSERT_TRUE(first.has_value());
  EXPECT_NE(first->grammar, nullptr);
  EXPECT_NE(first->vocab, nullptr);
  ASSERT_EQ(post("/v1/chat/completions", chat(R"("response_format":{"type":"json_object"})"))->status(), 200);
  EXPECT_EQ(engine_.submitted().back().constraint->grammar, first->grammar);  // cached
  ASSERT_EQ(post("/v1/completions", R"({"prompt":"x","structured_outputs":{"regex":"[0-9]+"}})")->status(), 200);
  ASSERT_TRUE(engine_.submitted().back().constraint.has_value());
  EXPECT_EQ(engine_.submitted().back().constraint->starts_after, -1);
  EXPECT_NE(engine_.submitted().back().constraint->grammar, first->grammar);
  ASSERT_EQ(post("/v1/chat/completions", chat(R"("temperature":0)"))->status(), 200);
  EXPECT_FALSE(engine_.submitted().back().constraint.has_value());
  ASSERT_EQ(
      post("/v1/chat/completions", chat(R"("chat_template_kwargs":{"enable_thinking":true},"guided_choice":["a","b"])"))
          ->status(),
      200);
  const auto think = engine_.submitted().back().constraint;
  ASSERT_TRUE(think.has_value());
  EXPECT_EQ(think->starts_after, tok().find_token("</think>").value_or(-2));
}

TEST_F(ParamsTest, TokenIdsOutsideTheVocabularyAre400) {
  script("unused");
  const std::string n = std::to_string(tok().n_vocab());
  for (const std::string& path : {std::string("/v1/chat/completions"), std::string("/v1/completions")}) {
    const std::string head = path == "/v1/completions" ? std::string(R"({"prompt":"hi")") : kChat;
    auto r = post(path, head + R"(,"stop_token_ids":[1,)" + n + "]}");
    EXPECT_EQ(r->status(), 400) << r->body();
    EXPECT_EQ(str(json(r->body())["error"]["param"]), "stop_token_ids") << r->body();
    r = post(path, head + R"(,"logit_bias":{")" + n + R"(":1}})");
    EXPECT_EQ(r->status(), 400) << r->body();
    EXPECT_EQ(str(json(r->body())["error"]["param"]), "logit_bias") << r->body();
  }
  EXPECT_TRUE(engine_.submitted().empty());
}

TEST_F(ParamsTest, DefaultValuesChangeNothing) {
  script("ok");
  const std::string defaults =
      R"("min_p":0,"repetition_penalty":1,"frequency_penalty":0,"presence_penalty":0,"logit_bias":{},"min_tokens":0)";
  ASSERT_EQ(post("/v1/chat/completions", chat(defaults))->status(), 200);
  ASSERT_EQ(post("/v1/completions", R"({"prompt":"hi",)" + defaults + "}")->status(), 200);
  for (const auto& req : engine_.submitted()) {
    EXPECT_EQ(req.sampling.min_p, 0.0f);
    EXPECT_EQ(req.sampling.repetition_penalty, 1.0f);
    EXPECT_TRUE(req.sampling.logit_bias.empty());
    EXPECT_EQ(req.sampling.min_tokens, 0u);
  }
}

TEST_F(ParamsTest, MinPReachesTheEngine) {
  script("ok");
  ASSERT_EQ(post("/v1/chat/completions", chat(R"("min_p":0.05)"))->status(), 200);
  ASSERT_EQ(post("/v1/completions", R"({"prompt":"hi","min_p":0.25})")->status(), 200);
  ASSERT_EQ(engine_.submitted().size(), 2u);
  EXPECT_FLOAT_EQ(engine_.submitted()[0].sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(engine_.submitted()[1].sampling.min_p, 0.25f);
}

TEST_F(ParamsTest, LogitBiasAndMinTokensReachTheEngine) {
  using LogitBias = std::vector<std::pair<int32_t, float>>;
  script("ok");
  ASSERT_EQ(post("/v1/chat/completions", chat(R"("logit_bias":{"5":2,"7":-100},"min_tokens":3)"))->status(), 200);
  ASSERT_EQ(post("/v1/completions", R"({"prompt":"hi","logit_bias":{"9":100},"min_tokens":1})")->status(), 200);
  ASSERT_EQ(engine_.submitted().size(), 2u);
  EXPECT_EQ(engine_.submitted()[0].sampling.logit_bias, (LogitBias{{5, 2.0f}, {7, -100.0f}}));
  EXPECT_EQ(engine_.submitted()[0].sampling.min_tokens, 3u);
  EXPECT_EQ(engine_.submitted()[1].sampling.logit_bias, (LogitBias{{9, 100.0f}}));
  EXPECT_EQ(engine_.submitted()[1].sampling.min_tokens, 1u);
}

TEST_F(ParamsTest, PenaltiesReachTheEngine) {
  script("ok");
  const std::string extra = R"("repetition_penalty":1.2,"frequency_penalty":0.5,"presence_penalty":-1.5)";
  ASSERT_EQ(post("/v1/chat/completions", chat(extra))->status(), 200);
  ASSERT_EQ(post("/v1/completions", std::string(R"({"prompt":"hi",)") + extra + "}")->status(), 200);
  for (const auto& req : engine_.submitted()) {
    EXPECT_FLOAT_EQ(req.sampling.repetition_penalty, 1.2f);
    EXPECT_FLOAT_EQ(req.sampling.frequency_penalty, 0.5f);
    EXPECT_FLOAT_EQ(req.sampling.presence_penalty, -1.5f);
  }
}

TEST_F(ParamsTest, IgnoredFieldsAreAccepted) {
  script("ok");
  const std::string extra = R"("user":"u-1","metadata":{"team":"a"},"store":false,"service_tier":"default")";
  auto r = post("/v1/chat/completions", chat(extra));
  EXPECT_EQ(r->status(), 200) << r->body();
  r = post("/v1/completions", R"({"prompt":"hi",)" + extra + "}");
  EXPECT_EQ(r->status(), 200) << r->body();
}

TEST_F(ParamsTest, EchoPrependsThePromptText) {
  script("x y z", /*end_with_eog=*/false);
  auto r = post("/v1/completions", R"({"prompt":"Hello","echo":true,"max_tokens":10})");
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  EXPECT_EQ(str(d["choices"][0]["text"]), "Hellox y z");
  EXPECT_EQ(d["usage"]["completion_tokens"].GetUint(), ids("x y z").size());
  // echo: false (the default) gives only the completion.
  r = post("/v1/completions", R"({"prompt":"Hello","echo":false,"max_tokens":10})");
  EXPECT_EQ(str(json(r->body())["choices"][0]["text"]), "x y z");
}

TEST_F(ParamsTest, EchoOfTokenIdsIsTheirText) {
  script("!", /*end_with_eog=*/false);
  const auto prompt = ids("Hello world");
  std::string arr;
  for (const int32_t id : prompt) arr += (arr.empty() ? "" : ",") + std::to_string(id);
  auto r = post("/v1/completions", R"({"prompt":[)" + arr + R"(],"echo":true})");
  ASSERT_EQ(r->status(), 200) << r->body();
  EXPECT_EQ(str(json(r->body())["choices"][0]["text"]), "Hello world!");
}

TEST_F(ParamsTest, EchoIsNotMatchedByStopStrings) {
  script("a stop b", /*end_with_eog=*/false);
  auto r = post("/v1/completions", R"({"prompt":"stop here: ","echo":true,"stop":"stop","max_tokens":20})");
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  EXPECT_EQ(str(d["choices"][0]["text"]), "stop here: a ");
  EXPECT_EQ(str(d["choices"][0]["finish_reason"]), "stop");
}

// vLLM's min_tokens: the stop strings are not looked for in the first min_tokens tokens' text.
TEST_F(ParamsTest, StopStringsWaitForMinTokens) {
  ASSERT_EQ(ids("a stop b").size(), 3u);  // "a", " stop", " b"
  for (const auto& [min_tokens, want] :
       std::vector<std::pair<int, std::string>>{{0, "a "}, {1, "a "}, {2, "a stop b"}, {3, "a stop b"}}) {
    script("a stop b", /*end_with_eog=*/false);
    auto r = post("/v1/completions",
                  R"({"prompt":"x","stop":"stop","max_tokens":20,"min_tokens":)" + std::to_string(min_tokens) + "}");
    ASSERT_EQ(r->status(), 200) << r->body();
    EXPECT_EQ(str(json(r->body())["choices"][0]["text"]), want) << "min_tokens " << min_tokens;
  }
}

TEST_F(ParamsTest, EchoStreamsThePromptInTheFirstChunk) {
  script("streamed text", /*end_with_eog=*/false);
  auto r = post("/v1/completions", R"({"prompt":"Once: ","echo":true,"stream":true,"max_tokens":20})");
  ASSERT_EQ(r->status(), 200);
  const auto texts = texts_of(*r);
  ASSERT_FALSE(texts.empty());
  EXPECT_EQ(texts[0].rfind("Once: ", 0), 0u) << texts[0];
  std::string all;
  for (const auto& t : texts) all += t;
  EXPECT_EQ(all, "Once: streamed text");
}

// The engine is asked for the prompt's logprobs; with max_tokens 0 nothing generated is reported.
TEST_F(ParamsTest, EchoWithLogprobsAsksForThePromptLogprobs) {
  script("unused");
  auto r = post("/v1/completions", R"({"prompt":"hi there","echo":true,"logprobs":1,"max_tokens":0})");
  ASSERT_EQ(r->status(), 200) << r->body();
  EXPECT_TRUE(engine_.submitted().back().sampling.prompt_logprobs);
  EXPECT_EQ(engine_.submitted().back().sampling.max_tokens, 1u) << "max_tokens 0: the engine makes one token, dropped";
  auto d = json(r->body());
  EXPECT_EQ(str(d["choices"][0]["text"]), "hi there");
  EXPECT_EQ(str(d["choices"][0]["finish_reason"]), "length");
  EXPECT_EQ(d["usage"]["completion_tokens"].GetInt(), 0);
}

TEST_F(ParamsTest, ParallelToolCallsFalseReturnsOneCall) {
  script(kTwoCalls);
  auto r = post("/v1/chat/completions", chat(kTools));
  ASSERT_EQ(r->status(), 200) << r->body();
  EXPECT_EQ(json(r->body())["choices"][0]["message"]["tool_calls"].Size(), 2u);  // the default: all of them

  r = post("/v1/chat/completions", chat(kTools + R"(,"parallel_tool_calls":false)"));
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  const auto& msg = d["choices"][0]["message"];
  ASSERT_EQ(msg["tool_calls"].Size(), 1u) << r->body();
  EXPECT_EQ(str(msg["tool_calls"][0]["function"]["arguments"]), R"({"city":"Paris"})");
  EXPECT_TRUE(msg["content"].IsNull()) << r->body();  // the dropped call's markup is not text
  EXPECT_EQ(str(d["choices"][0]["finish_reason"]), "tool_calls");
}

TEST_F(ParamsTest, ParallelToolCallsFalseStreamsOneCall) {
  script(kTwoCalls);
  auto r = post("/v1/chat/completions", chat(kTools + R"(,"parallel_tool_calls":false,"stream":true)"));
  ASSERT_EQ(r->status(), 200);
  std::string args, content;
  size_t names = 0;
  const auto chunks = chunks_of(*r);
  for (const auto& c : chunks) {
    if (c["choices"].Empty()) continue;
    const auto& delta = c["choices"][0]["delta"];
    if (delta.HasMember("content")) content += str(delta["content"]);
    if (!delta.HasMember("tool_calls")) continue;
    for (const auto& tc : delta["tool_calls"].GetArray()) {
      EXPECT_EQ(tc["index"].GetInt(), 0);
      if (tc["function"].HasMember("name")) ++names;
      args += str(tc["function"]["arguments"]);
    }
  }
  EXPECT_EQ(names, 1u);
  EXPECT_EQ(args, R"({"city":"Paris"})");
  EXPECT_EQ(content, "");
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(str(chunks.back()["choices"][0]["finish_reason"]), "tool_calls");
}

TEST_F(ParamsTest, ReasoningEffortNoneOrMinimalTurnsThinkingOff) {
  script("Just the answer.");
  ASSERT_EQ(post("/v1/chat/completions", chat(R"("chat_template_kwargs":{"enable_thinking":false})"))->status(), 200);
  const std::string off_prompt = last_prompt();
  ASSERT_FALSE(ends_with(off_prompt, "<think>\n")) << off_prompt;
  for (const char* effort : {"none", "minimal"}) {
    auto r = post("/v1/chat/completions", chat(std::string(R"("reasoning_effort":")") + effort + "\""));
    ASSERT_EQ(r->status(), 200) << r->body();
    EXPECT_EQ(last_prompt(), off_prompt) << effort;  // exactly as enable_thinking=false
    auto d = json(r->body());
    EXPECT_EQ(str(d["choices"][0]["message"]["content"]), "Just the answer.");
    EXPECT_FALSE(d["choices"][0]["message"].HasMember("reasoning_content"));
  }
}

TEST_F(ParamsTest, ReasoningEffortLowMediumHighKeepThinkingOn) {
  script("Hmm.</think>\n\nAnswer.");
  ASSERT_EQ(post("/v1/chat/completions", chat())->status(), 200);
  const std::string on_prompt = last_prompt();
  ASSERT_TRUE(ends_with(on_prompt, "<think>\n")) << on_prompt;
  for (const char* effort : {"low", "medium", "high"}) {
    auto r = post("/v1/chat/completions", chat(std::string(R"("reasoning_effort":")") + effort + "\""));
    ASSERT_EQ(r->status(), 200) << r->body();
    EXPECT_EQ(last_prompt(), on_prompt) << effort;
    auto d = json(r->body());
    EXPECT_EQ(str(d["choices"][0]["message"]["reasoning_content"]), "Hmm.");
    EXPECT_EQ(str(d["choices"][0]["message"]["content"]), "Answer.");
  }
}

TEST_F(ParamsTest, ExplicitEnableThinkingWinsOverReasoningEffort) {
  script("ok");
  ASSERT_EQ(post("/v1/chat/completions", chat())->status(), 200);
  const std::string on_prompt = last_prompt();
  ASSERT_EQ(
      post("/v1/chat/completions", chat(R"("reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true})"))
          ->status(),
      200);
  EXPECT_EQ(last_prompt(), on_prompt);
  ASSERT_EQ(post("/v1/chat/completions",
                 chat(R"("reasoning_effort":"high","extra_body":{"chat_template_kwargs":{"enable_thinking":false}})"))
                ->status(),
            200);
  EXPECT_FALSE(ends_with(last_prompt(), "<think>\n")) << last_prompt();
  // Other template kwargs are kept beside the one reasoning_effort sets.
  ASSERT_EQ(post("/v1/chat/completions",
                 chat(R"("reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":null,"x":1})"))
                ->status(),
            200);
  EXPECT_FALSE(ends_with(last_prompt(), "<think>\n")) << last_prompt();
}

TEST_F(ParamsTest, InvalidReasoningEffortIs400) {
  script("unused");
  auto r = post("/v1/chat/completions", chat(R"("reasoning_effort":"extreme")"));
  EXPECT_EQ(r->status(), 400);
  EXPECT_EQ(str(json(r->body())["error"]["param"]), "reasoning_effort");
}

}  // namespace
}  // namespace ds::test
