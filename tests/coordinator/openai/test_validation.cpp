// Every bad input gets an OpenAI error object with the right status and `param`, and never
// reaches the engine.
#include "tests/coordinator/openai/service_fixture.h"

namespace ds::test {
namespace {

struct BadCase {
  std::string path;
  std::string body;
  int status;
  const char* param;  // "" = null
};

const std::string kMsgs = R"("messages":[{"role":"user","content":"hi"}])";

std::string chat(const std::string& extra) {
  return "{" + kMsgs + (extra.empty() ? "" : "," + extra) + "}";
}

class ValidationTest : public ServiceTest, public ::testing::WithParamInterface<BadCase> {};

TEST_P(ValidationTest, RejectsWithOpenAIError) {
  const BadCase& c = GetParam();
  script("unused");
  auto reply = post(c.path, c.body);
  EXPECT_EQ(reply->status(), c.status) << c.body << " -> " << reply->body();
  auto d = json(reply->body());
  ASSERT_TRUE(d.IsObject() && d.HasMember("error")) << reply->body();
  const auto& e = d["error"];
  EXPECT_TRUE(e["message"].IsString());
  EXPECT_FALSE(str(e["message"]).empty());
  EXPECT_EQ(str(e["type"]), c.status == 404 || c.status < 500 ? "invalid_request_error" : "server_error");
  if (std::string(c.param).empty()) {
    EXPECT_TRUE(e["param"].IsNull()) << reply->body();
  } else {
    EXPECT_EQ(str(e["param"]), c.param) << reply->body();
  }
  EXPECT_TRUE(e.HasMember("code"));
  EXPECT_TRUE(engine_.submitted().empty());
}

const BadCase kChatCases[] = {
    {"/v1/chat/completions", "{not json", 400, ""},
    {"/v1/chat/completions", "[1,2]", 400, ""},
    {"/v1/chat/completions", "", 400, ""},
    {"/v1/chat/completions", "{\"messages\":\"\xff\xfe\"}", 400, ""},
    {"/v1/chat/completions", "{}", 400, "messages"},
    {"/v1/chat/completions", R"({"messages":[]})", 400, "messages"},
    {"/v1/chat/completions", R"({"messages":[{"content":"no role"}]})", 400, "messages"},
    {"/v1/chat/completions", R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "messages"},
    {"/v1/chat/completions", R"({"model":"gpt-4",)" + kMsgs.substr(0) + "}", 404, "model"},
    {"/v1/chat/completions", R"({"model":7,)" + kMsgs + "}", 400, "model"},
    {"/v1/chat/completions", R"({"stream":"yes",)" + kMsgs + "}", 400, "stream"},
    {"/v1/chat/completions", R"({"temperature":3,)" + kMsgs + "}", 400, "temperature"},
    {"/v1/chat/completions", R"({"temperature":"hot",)" + kMsgs + "}", 400, "temperature"},
    {"/v1/chat/completions", R"({"top_p":0,)" + kMsgs + "}", 400, "top_p"},
    {"/v1/chat/completions", R"({"top_p":1.5,)" + kMsgs + "}", 400, "top_p"},
    {"/v1/chat/completions", R"({"top_k":-2,)" + kMsgs + "}", 400, "top_k"},
    {"/v1/chat/completions", R"({"top_k":2.5,)" + kMsgs + "}", 400, "top_k"},
    {"/v1/chat/completions", R"({"seed":"x",)" + kMsgs + "}", 400, "seed"},
    {"/v1/chat/completions", R"({"max_tokens":0,)" + kMsgs + "}", 400, "max_tokens"},
    {"/v1/chat/completions", R"({"max_tokens":-5,)" + kMsgs + "}", 400, "max_tokens"},
    {"/v1/chat/completions", R"({"max_completion_tokens":1.5,)" + kMsgs + "}", 400, "max_completion_tokens"},
    {"/v1/chat/completions", R"({"max_tokens":100000,)" + kMsgs + "}", 400, "max_tokens"},
    {"/v1/chat/completions", R"({"n":17,)" + kMsgs + "}", 400, "n"},
    {"/v1/chat/completions", R"({"stop":"",)" + kMsgs + "}", 400, "stop"},
    {"/v1/chat/completions", R"({"stop":[1],)" + kMsgs + "}", 400, "stop"},
    {"/v1/chat/completions", R"({"stop":{"a":1},)" + kMsgs + "}", 400, "stop"},
    {"/v1/chat/completions", R"({"top_logprobs":17,"logprobs":true,)" + kMsgs + "}", 400, "top_logprobs"},
    {"/v1/chat/completions", R"({"top_logprobs":2,)" + kMsgs + "}", 400, "top_logprobs"},
    {"/v1/chat/completions", R"({"logprobs":1,)" + kMsgs + "}", 400, "logprobs"},
    {"/v1/chat/completions", R"({"logit_bias":{"five":1},)" + kMsgs + "}", 400, "logit_bias"},
    {"/v1/chat/completions", R"({"logit_bias":{"5":101},)" + kMsgs + "}", 400, "logit_bias"},
    {"/v1/chat/completions", R"({"min_p":1.5,)" + kMsgs + "}", 400, "min_p"},
    {"/v1/chat/completions", R"({"repetition_penalty":0,)" + kMsgs + "}", 400, "repetition_penalty"},
    {"/v1/chat/completions", R"({"presence_penalty":2.5,)" + kMsgs + "}", 400, "presence_penalty"},
    {"/v1/chat/completions", R"({"min_tokens":-1,)" + kMsgs + "}", 400, "min_tokens"},
    {"/v1/chat/completions", R"({"min_tokens":9,"max_tokens":8,)" + kMsgs + "}", 400, "min_tokens"},
    {"/v1/chat/completions", R"({"stop_token_ids":[-3],)" + kMsgs + "}", 400, "stop_token_ids"},
    {"/v1/chat/completions", R"({"stop_token_ids":[99999999],)" + kMsgs + "}", 400, "stop_token_ids"},
    {"/v1/chat/completions", R"({"reasoning_effort":"extreme",)" + kMsgs + "}", 400, "reasoning_effort"},
    {"/v1/chat/completions", R"({"parallel_tool_calls":"no",)" + kMsgs + "}", 400, "parallel_tool_calls"},
    {"/v1/chat/completions",
     R"({"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"array","uniqueItems":true}}},)" +
         kMsgs + "}",
     400, "response_format"},
    {"/v1/chat/completions", R"({"response_format":{"type":"json_object"},"guided_regex":"a+",)" + kMsgs + "}", 400,
     "guided_regex"},
    {"/v1/completions", R"({"prompt":"x","structured_outputs":{"choice":[]}})", 400, "structured_outputs.choice"},
    {"/v1/completions", R"({"prompt":"x","structured_outputs":{"grammar":"root ::= x"}})", 400, "structured_outputs"},
    {"/v1/chat/completions", R"({"response_format":{"type":"json_schema"},)" + kMsgs + "}", 400, "response_format"},
    {"/v1/chat/completions", R"({"response_format":{"type":"yaml"},)" + kMsgs + "}", 400, "response_format"},
    {"/v1/chat/completions", R"({"tools":{},)" + kMsgs + "}", 400, "tools"},
    {"/v1/chat/completions", R"({"tools":[{"type":"function"}],)" + kMsgs + "}", 400, "tools"},
    {"/v1/chat/completions", R"({"tools":[{"type":"retrieval","function":{"name":"f"}}],)" + kMsgs + "}", 400, "tools"},
    {"/v1/chat/completions", R"({"tool_choice":"required",)" + kMsgs + "}", 400, "tool_choice"},
    {"/v1/chat/completions",
     R"({"tool_choice":"sometimes","tools":[{"type":"function","function":{"name":"f"}}],)" + kMsgs + "}", 400,
     "tool_choice"},
    {"/v1/chat/completions",
     R"({"tool_choice":{"type":"function","function":{"name":"g"}},"tools":[{"type":"function","function":{"name":"f"}}],)" +
         kMsgs + "}",
     400, "tool_choice"},
    {"/v1/chat/completions", R"({"chat_template_kwargs":[1],)" + kMsgs + "}", 400, "chat_template_kwargs"},
    {"/v1/chat/completions", R"({"stream_options":true,)" + kMsgs + "}", 400, "stream_options"},
    {"/v1/chat/completions", R"({"stream_options":{"include_usage":"y"},)" + kMsgs + "}", 400, "include_usage"},
    {"/v1/chat/completions",
     R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/a.png"}}]}]})", 400,
     "messages"},
    {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"extra_body":{"n":0}})", 400, "n"},
    // Deeply nested JSON is refused before anything walks it recursively.
    {"/v1/chat/completions", "{\"messages\":" + std::string(200, '[') + std::string(200, ']') + "}", 400, ""},
};

const BadCase kCompletionCases[] = {
    {"/v1/completions", "{}", 400, "prompt"},
    {"/v1/completions", R"({"prompt":""})", 400, "prompt"},
    {"/v1/completions", R"({"prompt":[]})", 400, "prompt"},
    {"/v1/completions", R"({"prompt":["a","b"]})", 400, "prompt"},
    {"/v1/completions", R"({"prompt":[1,"a"]})", 400, "prompt"},
    {"/v1/completions", R"({"prompt":[1, 99999999]})", 400, "prompt"},
    {"/v1/completions", R"({"prompt":[-1]})", 400, "prompt"},
    {"/v1/completions", R"({"prompt":{"text":"x"}})", 400, "prompt"},
    {"/v1/completions", R"({"prompt":"hi","max_tokens":0})", 400, "max_tokens"},
    {"/v1/completions", R"({"prompt":"hi","echo":"yes"})", 400, "echo"},
    {"/v1/completions", R"({"prompt":"hi","min_p":-1})", 400, "min_p"},
    {"/v1/completions", R"({"prompt":"hi","frequency_penalty":2.5})", 400, "frequency_penalty"},
    {"/v1/completions", R"({"prompt":"hi","logit_bias":{"1":"x"}})", 400, "logit_bias"},
    {"/v1/completions", R"({"prompt":"hi","logit_bias":{"99999999":1}})", 400, "logit_bias"},
    {"/v1/completions", R"({"prompt":"hi","min_tokens":20,"max_tokens":10})", 400, "min_tokens"},
    {"/v1/completions", R"({"prompt":"hi","stop_token_ids":[99999999]})", 400, "stop_token_ids"},
    {"/v1/completions", R"({"prompt":"hi","suffix":"x"})", 400, "suffix"},
    {"/v1/completions", R"({"prompt":"hi","best_of":2})", 400, "best_of"},
    {"/v1/completions", R"({"prompt":"hi","logprobs":17})", 400, "logprobs"},
    {"/v1/completions", R"({"prompt":"hi","model":"other"})", 404, "model"},
    {"/v1/completions", R"({"prompt":"hi","max_tokens":4096})", 400, "max_tokens"},
};

void PrintTo(const BadCase& c, std::ostream* os) {
  *os << c.path << " " << c.body.substr(0, 120);
}

std::string case_name(const ::testing::TestParamInfo<BadCase>& info) {
  return "case" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Chat, ValidationTest, ::testing::ValuesIn(kChatCases), case_name);
INSTANTIATE_TEST_SUITE_P(Completions, ValidationTest, ::testing::ValuesIn(kCompletionCases), case_name);

TEST_F(ServiceTest, PromptLongerThanContextIs400) {
  engine_.set_health({true, 1, 1, 0, 0, 0, 8});
  auto r = post("/v1/completions", R"({"prompt":"one two three four five six seven eight nine ten"})");
  EXPECT_EQ(r->status(), 400);
  EXPECT_NE(r->body().find("context_length_exceeded"), std::string::npos) << r->body();
}

TEST_F(ServiceTest, EngineRejectionIs400) {
  FakeScript s;
  s.reject = true;
  engine_.set_script(s);
  auto r = post("/v1/chat/completions", chat(""));
  EXPECT_EQ(r->status(), 400);
  EXPECT_NE(r->body().find("fake engine rejects"), std::string::npos);
}

TEST_F(ServiceTest, TemplateRaiseIs400) {
  // The fixture template raises when there is no user message.
  auto r = post("/v1/chat/completions", R"({"messages":[{"role":"system","content":"only system"}]})");
  if (r->status() == 200) GTEST_SKIP() << "fixture template accepts a system-only conversation";
  EXPECT_EQ(r->status(), 400) << r->body();
}

TEST_F(ServiceTest, AcceptsModelAliasesAndLenientFields) {
  script("ok");
  for (const char* model : {"tiny", "tiny-qwen35-q8_0.gguf", "tiny-qwen35-q8_0"}) {
    auto r = post("/v1/chat/completions", chat(std::string("\"model\":\"") + model +
                                               R"(","user":"u1","presence_penalty":0,"frequency_penalty":0,)"
                                               R"("n":1,"response_format":{"type":"text"},"unknown_field":[1],)"
                                               R"("stop":null,"temperature":null,"parallel_tool_calls":true)"));
    EXPECT_EQ(r->status(), 200) << model << ": " << r->body();
  }
}

TEST_F(ServiceTest, SamplingParametersReachTheEngine) {
  script("ok");
  auto r = post("/v1/chat/completions",
                chat(R"("temperature":0.5,"top_p":0.9,"top_k":40,"seed":-3,"max_completion_tokens":7,"max_tokens":99,)"
                     R"("logprobs":true,"top_logprobs":3,"ignore_eos":true)"));
  ASSERT_EQ(r->status(), 200) << r->body();
  const auto reqs = engine_.submitted();
  ASSERT_EQ(reqs.size(), 1u);
  const SamplingParams& s = reqs[0].sampling;
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  ASSERT_TRUE(s.seed.has_value());
  EXPECT_EQ(*s.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(s.max_tokens, 7u);  // max_completion_tokens wins
  EXPECT_TRUE(s.logprobs);
  EXPECT_EQ(s.top_logprobs, 3u);
  EXPECT_TRUE(s.ignore_eos);
}

TEST_F(ServiceTest, DefaultMaxTokensFillsTheContext) {
  script("ok");
  ASSERT_EQ(post("/v1/chat/completions", chat(""))->status(), 200);
  const auto reqs = engine_.submitted();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].sampling.max_tokens + reqs[0].prompt_ids.size(), 4096u);
  // The legacy completions API defaults to 16.
  ASSERT_EQ(post("/v1/completions", R"({"prompt":"hi"})")->status(), 200);
  EXPECT_EQ(engine_.submitted().back().sampling.max_tokens, 16u);
}

}  // namespace
}  // namespace ds::test
