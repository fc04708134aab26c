// Response shapes of /v1/chat/completions and /v1/completions, streaming and not, with the
// fake engine "generating" text encoded by the fixture tokenizer.
#include "coordinator/openai/response_json.h"
#include "tests/coordinator/openai/service_fixture.h"

namespace ds::test {
namespace {

const std::string kChat = R"({"model":"tiny","messages":[{"role":"user","content":"hi"}])";
std::string chat(const std::string& extra = "") {
  return kChat + (extra.empty() ? "" : "," + extra) + "}";
}

const std::string kTools =
    R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
    R"("properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}])";
const std::string kToolCallText =
    "Let me check.</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";

// Concatenation of a delta field over all chunks.
std::string joined(const std::vector<rapidjson::Document>& chunks, const char* field) {
  std::string out;
  for (const auto& c : chunks) {
    if (!c.HasMember("choices") || c["choices"].Empty()) continue;
    const auto& delta = c["choices"][0]["delta"];
    if (delta.HasMember(field) && delta[field].IsString()) out += delta[field].GetString();
  }
  return out;
}

class StreamTest : public ServiceTest {
 protected:
  // Parses the SSE body; checks the framing ([DONE] last, every other event JSON).
  std::vector<rapidjson::Document> chunks_of(const RecordingChannel& c) {
    EXPECT_TRUE(c.streamed());
    EXPECT_EQ(c.content_type(), "text/event-stream");
    const auto payloads = sse_payloads(c.body());
    EXPECT_FALSE(payloads.empty());
    EXPECT_EQ(payloads.back(), "[DONE]");
    std::vector<rapidjson::Document> out;
    for (size_t i = 0; i + 1 < payloads.size(); ++i) out.push_back(json(payloads[i]));
    return out;
  }
};

TEST_F(ServiceTest, ChatNonStreamingShape) {
  script("Thinking hard.</think>\n\nHello there, friend!");
  auto r = post("/v1/chat/completions", chat());
  ASSERT_EQ(r->status(), 200) << r->body();
  EXPECT_EQ(r->content_type(), "application/json");
  auto d = json(r->body());
  EXPECT_EQ(str(d["id"]).rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(str(d["object"]), "chat.completion");
  EXPECT_TRUE(d["created"].IsInt64());
  EXPECT_EQ(str(d["model"]), "tiny");
  ASSERT_EQ(d["choices"].Size(), 1u);
  const auto& choice = d["choices"][0];
  EXPECT_EQ(choice["index"].GetInt(), 0);
  EXPECT_EQ(str(choice["message"]["role"]), "assistant");
  EXPECT_EQ(str(choice["message"]["content"]), "Hello there, friend!");
  EXPECT_EQ(str(choice["message"]["reasoning_content"]), "Thinking hard.");
  EXPECT_FALSE(choice["message"].HasMember("tool_calls"));
  EXPECT_EQ(str(choice["finish_reason"]), "stop");
  EXPECT_TRUE(choice["logprobs"].IsNull());
  // Usage: the prompt the engine saw, and every generated token including <|im_end|>.
  const auto reqs = engine_.submitted();
  ASSERT_EQ(reqs.size(), 1u);
  const size_t generated = ids("Thinking hard.</think>\n\nHello there, friend!").size() + 1;
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetUint(), reqs[0].prompt_ids.size());
  EXPECT_EQ(d["usage"]["completion_tokens"].GetUint(), generated);
  EXPECT_EQ(d["usage"]["total_tokens"].GetUint(), reqs[0].prompt_ids.size() + generated);
  EXPECT_EQ(reqs[0].request_id, str(d["id"]));
}

TEST_F(ServiceTest, ThinkingDisabledGivesPlainContent) {
  script("Just the answer.");
  auto r = post("/v1/chat/completions", chat(R"("chat_template_kwargs":{"enable_thinking":false})"));
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  EXPECT_EQ(str(d["choices"][0]["message"]["content"]), "Just the answer.");
  EXPECT_FALSE(d["choices"][0]["message"].HasMember("reasoning_content"));
}

TEST_F(ServiceTest, MaxTokensGivesLength) {
  script("one two three four five six seven", /*end_with_eog=*/false);
  auto r = post("/v1/chat/completions", chat(R"("max_tokens":3,"chat_template_kwargs":{"enable_thinking":false})"));
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  EXPECT_EQ(str(d["choices"][0]["finish_reason"]), "length");
  EXPECT_EQ(d["usage"]["completion_tokens"].GetUint(), 3u);
  const std::vector<int32_t> all = ids("one two three four five six seven");
  EXPECT_EQ(str(d["choices"][0]["message"]["content"]), tok().decode({all.begin(), all.begin() + 3}, false));
}

TEST_F(ServiceTest, ToolCallNonStreaming) {
  script(kToolCallText);
  auto r = post("/v1/chat/completions", chat(kTools));
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  const auto& msg = d["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].IsNull()) << r->body();
  EXPECT_EQ(str(msg["reasoning_content"]), "Let me check.");
  ASSERT_TRUE(msg["tool_calls"].IsArray()) << r->body();
  ASSERT_EQ(msg["tool_calls"].Size(), 1u);
  const auto& call = msg["tool_calls"][0];
  EXPECT_EQ(str(call["id"]).rfind("call_", 0), 0u);
  EXPECT_EQ(str(call["type"]), "function");
  EXPECT_EQ(str(call["function"]["name"]), "get_weather");
  auto args = json(str(call["function"]["arguments"]));
  EXPECT_EQ(str(args["city"]), "Paris");
  EXPECT_EQ(args["days"].GetInt(), 3);
  EXPECT_EQ(str(d["choices"][0]["finish_reason"]), "tool_calls");
}

TEST_F(ServiceTest, ToolChoiceNoneLeavesToolMarkupAsText) {
  script(kToolCallText);
  auto r = post("/v1/chat/completions", chat(kTools + R"(,"tool_choice":"none")"));
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  EXPECT_FALSE(d["choices"][0]["message"].HasMember("tool_calls"));
  EXPECT_NE(str(d["choices"][0]["message"]["content"]).find("<function=get_weather>"), std::string::npos);
  EXPECT_EQ(str(d["choices"][0]["finish_reason"]), "stop");
}

TEST_F(StreamTest, ChatStreamingShape) {
  script("Hmm.</think>\n\nHello there, friend! 你好");
  auto r = post("/v1/chat/completions", chat(R"("stream":true,"stream_options":{"include_usage":true})"));
  ASSERT_EQ(r->status(), 200);
  auto chunks = chunks_of(*r);
  ASSERT_GE(chunks.size(), 4u);
  const std::string id = str(chunks[0]["id"]);
  for (const auto& c : chunks) {
    EXPECT_EQ(str(c["object"]), "chat.completion.chunk");
    EXPECT_EQ(str(c["id"]), id);
    EXPECT_EQ(str(c["model"]), "tiny");
  }
  // First: the role announcement.
  EXPECT_EQ(str(chunks[0]["choices"][0]["delta"]["role"]), "assistant");
  EXPECT_TRUE(chunks[0]["choices"][0]["finish_reason"].IsNull());
  // Content and reasoning arrive split, and concatenate to the whole text.
  EXPECT_EQ(joined(chunks, "reasoning_content"), "Hmm.");
  EXPECT_EQ(joined(chunks, "content"), "Hello there, friend! 你好");
  // Then the finish chunk, then the usage chunk with no choices.
  const auto& finish = chunks[chunks.size() - 2];
  EXPECT_EQ(str(finish["choices"][0]["finish_reason"]), "stop");
  const auto& usage = chunks.back();
  EXPECT_TRUE(usage["choices"].IsArray() && usage["choices"].Empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"].GetUint(), ids("Hmm.</think>\n\nHello there, friend! 你好").size() + 1);
  for (size_t i = 1; i + 2 < chunks.size(); ++i) {
    EXPECT_TRUE(chunks[i]["choices"][0]["finish_reason"].IsNull());
  }
}

TEST_F(StreamTest, NoUsageChunkUnlessAsked) {
  script("fine");
  auto r = post("/v1/chat/completions", chat(R"("stream":true)"));
  auto chunks = chunks_of(*r);
  for (const auto& c : chunks) EXPECT_FALSE(c.HasMember("usage"));
  EXPECT_EQ(str(chunks.back()["choices"][0]["finish_reason"]), "stop");
}

TEST_F(StreamTest, NeverSplitsUtf8) {
  // Emoji and CJK are several bytes that the byte-level BPE may split across tokens.
  const std::string text = "😀🎉 naïve 日本語テキスト 🚀";
  script(text);
  auto r = post("/v1/chat/completions", chat(R"("stream":true,"chat_template_kwargs":{"enable_thinking":false})"));
  auto chunks = chunks_of(*r);  // RapidJSON would reject invalid UTF-8 in strings? It does not: check bytes.
  std::string all;
  for (const auto& c : chunks) {
    if (c["choices"].Empty()) continue;
    const auto& delta = c["choices"][0]["delta"];
    if (!delta.HasMember("content")) continue;
    const std::string piece = delta["content"].GetString();
    EXPECT_EQ(openai::sanitize_utf8(piece), piece) << "partial UTF-8 in a chunk";
    all += piece;
  }
  EXPECT_EQ(all, text);
}

TEST_F(StreamTest, ToolCallStreaming) {
  script(kToolCallText);
  auto r = post("/v1/chat/completions", chat(kTools + R"(,"stream":true)"));
  auto chunks = chunks_of(*r);
  std::string name, args, id;
  for (const auto& c : chunks) {
    if (c["choices"].Empty()) continue;
    const auto& delta = c["choices"][0]["delta"];
    if (!delta.HasMember("tool_calls")) continue;
    for (const auto& tc : delta["tool_calls"].GetArray()) {
      EXPECT_EQ(tc["index"].GetInt(), 0);
      if (tc.HasMember("id")) id = tc["id"].GetString();
      if (tc["function"].HasMember("name")) name += tc["function"]["name"].GetString();
      args += tc["function"]["arguments"].GetString();
    }
  }
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(name, "get_weather");
  auto a = json(args);
  EXPECT_EQ(str(a["city"]), "Paris");
  EXPECT_EQ(str(chunks.back()["choices"][0]["finish_reason"]), "tool_calls");
  EXPECT_EQ(joined(chunks, "reasoning_content"), "Let me check.");
}

TEST_F(ServiceTest, StopStringTrimsAndCancels) {
  script("alpha beta gamma delta epsilon zeta eta theta", /*end_with_eog=*/false);
  auto r = post("/v1/completions", R"({"prompt":"count","stop":["delta","zzz"],"max_tokens":50})");
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  EXPECT_EQ(str(d["object"]), "text_completion");
  EXPECT_EQ(str(d["choices"][0]["text"]), "alpha beta gamma ");
  EXPECT_EQ(str(d["choices"][0]["finish_reason"]), "stop");
  EXPECT_TRUE(engine_.wait_for_cancel(std::chrono::milliseconds(2000)));  // the engine stops early
  EXPECT_TRUE(engine_.was_cancelled(str(d["id"])));
  EXPECT_EQ(d["usage"]["completion_tokens"].GetUint(), ids("alpha beta gamma delta").size());
}

TEST_F(StreamTest, StopStringAcrossTokensNeverLeaks) {
  // "gam" + "ma" style splits: the stop string's prefix is held back, never streamed.
  script("one two three four five", /*end_with_eog=*/false);
  auto r =
      post("/v1/chat/completions",
           chat(R"("stream":true,"stop":"ee fo","max_tokens":50,"chat_template_kwargs":{"enable_thinking":false})"));
  auto chunks = chunks_of(*r);
  EXPECT_EQ(joined(chunks, "content"), "one two thr");
  EXPECT_EQ(str(chunks.back()["choices"][0]["finish_reason"]), "stop");
}

TEST_F(ServiceTest, CompletionWithTokenIdsAndLogprobs) {
  script("x y z", /*end_with_eog=*/false);
  auto prompt = ids("Hello world");
  const std::string body = R"({"prompt":[)" + std::to_string(prompt[0]) + "," + std::to_string(prompt[1]) +
                           R"(],"logprobs":2,"max_tokens":10})";
  auto r = post("/v1/completions", body);
  ASSERT_EQ(r->status(), 200) << r->body();
  EXPECT_EQ(engine_.submitted()[0].prompt_ids, prompt);
  auto d = json(r->body());
  EXPECT_EQ(str(d["id"]).rfind("cmpl-", 0), 0u);
  EXPECT_EQ(str(d["choices"][0]["text"]), "x y z");
  const auto& lp = d["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.IsObject()) << r->body();
  EXPECT_EQ(lp["tokens"].Size(), ids("x y z").size());
  EXPECT_EQ(lp["token_logprobs"].Size(), lp["tokens"].Size());
  EXPECT_EQ(lp["top_logprobs"][0].MemberCount(), 2u);
  EXPECT_EQ(lp["text_offset"][0].GetUint(), 0u);
  EXPECT_EQ(lp["text_offset"][1].GetUint(), 1u);  // after "x"
  EXPECT_EQ(str(d["choices"][0]["finish_reason"]), "stop");
}

TEST_F(ServiceTest, ChatLogprobsShape) {
  script("ok", /*end_with_eog=*/false);
  auto r = post("/v1/chat/completions",
                chat(R"("logprobs":true,"top_logprobs":2,"chat_template_kwargs":{"enable_thinking":false})"));
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  const auto& content = d["choices"][0]["logprobs"]["content"];
  ASSERT_TRUE(content.IsArray()) << r->body();
  ASSERT_EQ(content.Size(), ids("ok").size());
  EXPECT_EQ(str(content[0]["token"]), "ok");
  EXPECT_DOUBLE_EQ(content[0]["logprob"].GetDouble(), -0.25);
  EXPECT_EQ(content[0]["bytes"].Size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"].Size(), 2u);
}

TEST_F(StreamTest, CompletionStreaming) {
  script("streamed text here", /*end_with_eog=*/false);
  auto r = post("/v1/completions",
                R"({"prompt":"go","stream":true,"max_tokens":50,"stream_options":{"include_usage":true}})");
  auto chunks = chunks_of(*r);
  std::string text;
  for (const auto& c : chunks) {
    EXPECT_EQ(str(c["object"]), "text_completion");
    if (!c["choices"].Empty()) text += c["choices"][0]["text"].GetString();
  }
  EXPECT_EQ(text, "streamed text here");
  EXPECT_EQ(str(chunks[chunks.size() - 2]["choices"][0]["finish_reason"]), "stop");
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"].GetUint(), ids("streamed text here").size());
}

TEST_F(ServiceTest, EngineErrorIs500) {
  FakeScript s;
  s.tokens = ids("partial");
  s.end = FinishReason::kError;
  s.error = "worker 0 died";
  engine_.set_script(s);
  auto r = post("/v1/chat/completions", chat());
  EXPECT_EQ(r->status(), 500);
  auto d = json(r->body());
  EXPECT_EQ(str(d["error"]["type"]), "server_error");
  EXPECT_NE(str(d["error"]["message"]).find("worker 0 died"), std::string::npos);
}

TEST_F(StreamTest, EngineErrorMidStreamIsReportedInBand) {
  FakeScript s;
  s.tokens = ids("partial");
  s.end = FinishReason::kError;
  s.error = "worker 0 died";
  engine_.set_script(s);
  auto r = post("/v1/chat/completions", chat(R"("stream":true)"));
  EXPECT_EQ(r->status(), 200);
  const auto payloads = sse_payloads(r->body());
  ASSERT_GE(payloads.size(), 2u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  auto err = json(payloads[payloads.size() - 2]);
  EXPECT_NE(str(err["error"]["message"]).find("worker 0 died"), std::string::npos);
}

TEST_F(ServiceTest, DisconnectCancelsTheEngineRequest) {
  FakeScript s;
  s.tokens = ids("a b c d e f g h i j k l m n o p");
  s.delay = std::chrono::milliseconds(50);
  engine_.set_script(s);
  auto channel = std::make_shared<RecordingChannel>();
  HttpRequest req{"POST", "/v1/chat/completions", "", {{"content-type", "application/json"}}, chat(R"("stream":true)")};
  DisconnectHook hook = service_->handler().handle(req, channel);
  ASSERT_TRUE(hook);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  hook();
  EXPECT_TRUE(engine_.wait_for_cancel(std::chrono::milliseconds(2000)));
  EXPECT_TRUE(engine_.was_cancelled(engine_.submitted()[0].request_id));
}

}  // namespace
}  // namespace ds::test
