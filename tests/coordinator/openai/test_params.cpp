// Request parameters parsed straight from JSON (no service): exact values in SamplingParams,
// range errors naming the parameter, the vocabulary check and the temporary refusal of what
// the engine does not apply yet.
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>
#include <utility>
#include <vector>

#include "coordinator/http/api_error.h"
#include "coordinator/openai/request.h"

namespace ds::test {
namespace {

using openai::ChatParams;
using openai::CompletionParams;
using LogitBias = std::vector<std::pair<int32_t, float>>;

rapidjson::Document doc_of(const std::string& body) {
  rapidjson::Document d;
  d.Parse(body.c_str(), body.size());
  EXPECT_FALSE(d.HasParseError()) << body;
  return d;
}

const std::string kMsgs = R"("messages":[{"role":"user","content":"hi"}])";

ChatParams chat(const std::string& extra) {
  return openai::parse_chat_params(doc_of("{" + kMsgs + (extra.empty() ? "" : "," + extra) + "}"));
}
CompletionParams completion(const std::string& extra) {
  return openai::parse_completion_params(doc_of(R"({"prompt":"hi")" + (extra.empty() ? "" : "," + extra) + "}"));
}

// The ApiError `fn` throws (status 0 when it throws none).
template <typename Fn>
ApiError error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "no error");
}

const char* kControls = R"("min_p":0.05,"repetition_penalty":1.1,"frequency_penalty":-0.5,"presence_penalty":1.5,)"
                        R"("logit_bias":{"5":1.5,"2":-100},"min_tokens":3,"max_tokens":10,"stop_token_ids":[7,3])";

void expect_controls(const SamplingParams& s) {
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.presence_penalty, 1.5f);
  EXPECT_EQ(s.logit_bias, (LogitBias{{2, -100.0f}, {5, 1.5f}}));
  EXPECT_EQ(s.min_tokens, 3u);
  EXPECT_EQ(s.stop_token_ids, (std::vector<int32_t>{7, 3}));
}

TEST(RequestParams, LogitControlsParseExactlyOnBothRoutes) {
  expect_controls(chat(kControls).sampling);
  expect_controls(completion(kControls).sampling);
}

TEST(RequestParams, DefaultsWhenAbsentOrNull) {
  for (const std::string& extra :
       {std::string(), std::string(R"("min_p":null,"repetition_penalty":null,"frequency_penalty":null,)"
                                   R"("presence_penalty":null,"logit_bias":null,"min_tokens":null,)"
                                   R"("stop_token_ids":null,"reasoning_effort":null,"parallel_tool_calls":null)")}) {
    const ChatParams p = chat(extra);
    const SamplingParams d;
    EXPECT_EQ(p.sampling.min_p, d.min_p);
    EXPECT_EQ(p.sampling.repetition_penalty, d.repetition_penalty);
    EXPECT_EQ(p.sampling.frequency_penalty, d.frequency_penalty);
    EXPECT_EQ(p.sampling.presence_penalty, d.presence_penalty);
    EXPECT_TRUE(p.sampling.logit_bias.empty());
    EXPECT_EQ(p.sampling.min_tokens, 0u);
    EXPECT_TRUE(p.sampling.stop_token_ids.empty());
    EXPECT_TRUE(p.parallel_tool_calls);
    EXPECT_FALSE(p.enable_thinking.has_value());
  }
}

TEST(RequestParams, RangeBoundsAreAccepted) {
  EXPECT_FLOAT_EQ(chat(R"("min_p":1)").sampling.min_p, 1.0f);
  EXPECT_FLOAT_EQ(chat(R"("repetition_penalty":1e9)").sampling.repetition_penalty, 1e9f);
  EXPECT_FLOAT_EQ(chat(R"("repetition_penalty":0.01)").sampling.repetition_penalty, 0.01f);
  EXPECT_FLOAT_EQ(chat(R"("frequency_penalty":-2)").sampling.frequency_penalty, -2.0f);
  EXPECT_FLOAT_EQ(chat(R"("presence_penalty":2)").sampling.presence_penalty, 2.0f);
  EXPECT_EQ(chat(R"("logit_bias":{"0":100,"2147483647":-100})").sampling.logit_bias,
            (LogitBias{{0, 100.0f}, {2147483647, -100.0f}}));
  EXPECT_EQ(chat(R"("min_tokens":10,"max_tokens":10)").sampling.min_tokens, 10u);
  EXPECT_EQ(chat(R"("min_tokens":10,"max_completion_tokens":10,"max_tokens":5)").sampling.min_tokens, 10u);
  EXPECT_EQ(completion(R"("min_tokens":100)").sampling.min_tokens, 100u);  // max_tokens not given
  std::string ids = "[0";
  for (int i = 1; i < 64; ++i) ids += "," + std::to_string(i);
  EXPECT_EQ(chat(R"("stop_token_ids":)" + ids + "]").sampling.stop_token_ids.size(), 64u);
}

TEST(RequestParams, LogitBiasIsSortedWithOneEntryPerId) {
  // A repeated id (also spelled with a leading zero) keeps the last value, as JSON decoders do.
  EXPECT_EQ(chat(R"("logit_bias":{"9":1,"5":2,"05":3,"1":-1})").sampling.logit_bias,
            (LogitBias{{1, -1.0f}, {5, 3.0f}, {9, 1.0f}}));
  EXPECT_TRUE(chat(R"("logit_bias":{})").sampling.logit_bias.empty());
}

struct BadParam {
  std::string extra;
  const char* param;
};

class RequestParamErrors : public ::testing::TestWithParam<BadParam> {};

TEST_P(RequestParamErrors, Are400NamingTheParameter) {
  const BadParam& c = GetParam();
  for (const bool chat_route : {true, false}) {
    const ApiError e = error_of([&] { chat_route ? (void)chat(c.extra) : (void)completion(c.extra); });
    EXPECT_EQ(e.status(), 400) << c.extra;
    EXPECT_EQ(e.param(), c.param) << c.extra << ": " << e.what();
  }
}

const BadParam kBadParams[] = {
    {R"("min_p":-0.1)", "min_p"},
    {R"("min_p":1.01)", "min_p"},
    {R"("min_p":"0.1")", "min_p"},
    {R"("repetition_penalty":0)", "repetition_penalty"},
    {R"("repetition_penalty":-1)", "repetition_penalty"},
    {R"("repetition_penalty":2e9)", "repetition_penalty"},
    {R"("repetition_penalty":true)", "repetition_penalty"},
    {R"("frequency_penalty":2.01)", "frequency_penalty"},
    {R"("frequency_penalty":-3)", "frequency_penalty"},
    {R"("presence_penalty":-2.5)", "presence_penalty"},
    {R"("presence_penalty":[1])", "presence_penalty"},
    {R"("logit_bias":[1,2])", "logit_bias"},
    {R"("logit_bias":"5:1")", "logit_bias"},
    {R"("logit_bias":{"abc":1})", "logit_bias"},
    {R"("logit_bias":{"":1})", "logit_bias"},
    {R"("logit_bias":{"-1":1})", "logit_bias"},
    {R"("logit_bias":{"+5":1})", "logit_bias"},
    {R"("logit_bias":{"1.5":1})", "logit_bias"},
    {R"("logit_bias":{" 5":1})", "logit_bias"},
    {R"("logit_bias":{"2147483648":1})", "logit_bias"},
    {R"("logit_bias":{"5":100.5})", "logit_bias"},
    {R"("logit_bias":{"5":-101})", "logit_bias"},
    {R"("logit_bias":{"5":"1"})", "logit_bias"},
    {R"("logit_bias":{"5":null})", "logit_bias"},
    {R"("logit_bias":{"5":{"x":1}})", "logit_bias"},
    {R"("min_tokens":-1)", "min_tokens"},
    {R"("min_tokens":1.5)", "min_tokens"},
    {R"("min_tokens":"2")", "min_tokens"},
    {R"("min_tokens":11,"max_tokens":10)", "min_tokens"},
    {R"("stop_token_ids":5)", "stop_token_ids"},
    {R"("stop_token_ids":[-1])", "stop_token_ids"},
    {R"("stop_token_ids":[1.5])", "stop_token_ids"},
    {R"("stop_token_ids":["1"])", "stop_token_ids"},
    {R"("stop_token_ids":[2147483648])", "stop_token_ids"},
    {R"("stop_token_ids":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,)"
     R"(32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64])",
     "stop_token_ids"},
};

INSTANTIATE_TEST_SUITE_P(All, RequestParamErrors, ::testing::ValuesIn(kBadParams));

TEST(RequestParams, ChatMinTokensAgainstMaxCompletionTokens) {
  EXPECT_EQ(error_of([] { chat(R"("min_tokens":6,"max_completion_tokens":5,"max_tokens":50)"); }).param(),
            "min_tokens");
}

TEST(RequestParams, TokenIdsOutsideTheVocabulary) {
  SamplingParams s;
  s.logit_bias = {{0, 1.0f}, {99, -1.0f}};
  s.stop_token_ids = {0, 99};
  EXPECT_NO_THROW(openai::check_token_ids(s, 100));
  ApiError e = error_of([&] { openai::check_token_ids(s, 99); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "logit_bias");
  s.logit_bias.clear();
  e = error_of([&] { openai::check_token_ids(s, 99); });
  EXPECT_EQ(e.param(), "stop_token_ids");
  EXPECT_NE(std::string(e.what()).find("99"), std::string::npos) << e.what();
}

TEST(RequestParams, ReasoningEffortMapsToThinking) {
  for (const char* off : {"none", "minimal"}) {
    EXPECT_EQ(chat(std::string(R"("reasoning_effort":")") + off + "\"").enable_thinking, false) << off;
  }
  for (const char* on : {"low", "medium", "high"}) {
    EXPECT_EQ(chat(std::string(R"("reasoning_effort":")") + on + "\"").enable_thinking, true) << on;
  }
  for (const char* bad : {R"("reasoning_effort":"max")", R"("reasoning_effort":"")", R"("reasoning_effort":"HIGH")",
                          R"("reasoning_effort":2)"}) {
    const ApiError e = error_of([&] { chat(bad); });
    EXPECT_EQ(e.status(), 400) << bad;
    EXPECT_EQ(e.param(), "reasoning_effort") << bad;
  }
}

TEST(RequestParams, ExplicitEnableThinkingWinsOverReasoningEffort) {
  EXPECT_FALSE(
      chat(R"("reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true})").enable_thinking.has_value());
  EXPECT_FALSE(chat(R"("reasoning_effort":"high","extra_body":{"chat_template_kwargs":{"enable_thinking":false}})")
                   .enable_thinking.has_value());
  // A null enable_thinking is not a setting.
  EXPECT_EQ(chat(R"("reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":null})").enable_thinking,
            false);
  // Other kwargs do not count either.
  EXPECT_EQ(chat(R"("reasoning_effort":"low","chat_template_kwargs":{"x":1})").enable_thinking, true);
}

TEST(RequestParams, ParallelToolCalls) {
  EXPECT_TRUE(chat("").parallel_tool_calls);
  EXPECT_TRUE(chat(R"("parallel_tool_calls":true)").parallel_tool_calls);
  EXPECT_FALSE(chat(R"("parallel_tool_calls":false)").parallel_tool_calls);
  EXPECT_EQ(error_of([] { chat(R"("parallel_tool_calls":"no")"); }).param(), "parallel_tool_calls");
}

TEST(RequestParams, Echo) {
  EXPECT_FALSE(completion("").echo);
  EXPECT_TRUE(completion(R"("echo":true)").echo);
  EXPECT_FALSE(completion(R"("echo":false,"logprobs":2)").echo);
  EXPECT_TRUE(completion(R"("echo":true,"logprobs":null)").echo);
  EXPECT_EQ(error_of([] { completion(R"("echo":"yes")"); }).param(), "echo");
  // With logprobs, the prompt's logprobs too; max_tokens 0 only with echo.
  EXPECT_TRUE(completion(R"("echo":true,"logprobs":0)").sampling.prompt_logprobs);
  EXPECT_FALSE(completion(R"("echo":false,"logprobs":3)").sampling.prompt_logprobs);
  EXPECT_FALSE(completion(R"("echo":true)").sampling.prompt_logprobs);
  EXPECT_EQ(*completion(R"("echo":true,"max_tokens":0)").max_tokens, 0u);
  EXPECT_EQ(error_of([] { completion(R"("max_tokens":0)"); }).param(), "max_tokens");
}

TEST(RequestParams, IgnoredFieldsAreAccepted) {
  const std::string extra = R"("user":"u-42","metadata":{"k":"v"},"store":true,"service_tier":"auto")";
  EXPECT_NO_THROW(chat(extra));
  EXPECT_NO_THROW(completion(extra));
  // Whatever their type: they are not ours to validate.
  EXPECT_NO_THROW(chat(R"("user":7,"metadata":null,"store":"yes","service_tier":["flex"])"));
}

}  // namespace
}  // namespace ds::test
