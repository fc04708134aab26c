// Completions' echo with logprobs end to end (CPU workers, f32): the prompt tokens' logprobs
// against the independent HF float32 reference, against the logprobs the same tokens get when
// generated, across chunked prefill (the 1,500-token prompt in 512-token steps, 2 head passes
// each) and with speculation on; never a prefix-cache hit (every prompt row is computed).
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/e2e/server_process.h"
#include "tests/testutil/reference.h"
#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

rapidjson::Document parse_ok(const HttpReply& r) {
  EXPECT_EQ(r.status, 200) << r.body;
  rapidjson::Document d;
  d.Parse(r.body.c_str());
  EXPECT_FALSE(d.HasParseError()) << r.body;
  return d;
}

std::string echo_body(const std::vector<int32_t>& prompt, uint32_t max_tokens, uint32_t top) {
  return R"({"prompt": )" + ids_json(prompt) + R"(, "echo": true, "logprobs": )" + std::to_string(top) +
         R"(, "max_tokens": )" + std::to_string(max_tokens) + R"(, "temperature": 0, "ignore_eos": true})";
}

class PromptLogprobsE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    plain_ = new ServerProcess(
        {"--model", tiny_model_path(), "--workers", "2", "--port", "0", "--threads", "1", "--max-batch-tokens", "512"});
    spec_ = new ServerProcess({"--model", tiny_model_path(), "--workers", "1", "--port", "0", "--spec-k", "3"});
  }
  static void TearDownTestSuite() { stop_servers({&plain_, &spec_}); }
  static ServerProcess* plain_;
  static ServerProcess* spec_;
};
ServerProcess* PromptLogprobsE2E::plain_ = nullptr;
ServerProcess* PromptLogprobsE2E::spec_ = nullptr;

// Entry p > 0 of the echo logprobs is the reference's row p - 1 (the logits that predict token
// p): its alternatives are the reference's top logits minus its log-sum-exp. Tolerance 1e-3:
// the CPU f32 path matches HF float32 logits to ~4e-5; 1e-3 leaves room for the log-sum-exp.
TEST_F(PromptLogprobsE2E, EchoLogprobsMatchTheReference) {
  const ReferencePrompt ref = load_reference_prompt("rand_1500");
  constexpr uint32_t kTop = 5;
  const HttpReply reply = post_completion(plain_->port(), echo_body(ref.ids, 0, kTop));
  rapidjson::Document d = parse_ok(reply);
  const rapidjson::Value& c = d["choices"][0];
  EXPECT_STREQ(c["finish_reason"].GetString(), "length");
  EXPECT_EQ(d["usage"]["completion_tokens"].GetUint(), 0u);
  const rapidjson::Value& lp = c["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].Size(), ref.ids.size()) << "one entry per prompt token, nothing generated";
  EXPECT_TRUE(lp["token_logprobs"][0].IsNull());
  EXPECT_TRUE(lp["top_logprobs"][0].IsNull());
  size_t compared = 0;
  for (size_t p = 1; p < ref.ids.size(); ++p) {
    const auto i = static_cast<rapidjson::SizeType>(p);
    const std::vector<float>& top = ref.logits.topk_logits[p - 1];
    const double lse = ref.logits.logsumexp[p - 1];
    const rapidjson::Value& alts = lp["top_logprobs"][i];
    std::vector<double> got;
    for (auto m = alts.MemberBegin(); m != alts.MemberEnd(); ++m) got.push_back(m->value.GetDouble());
    std::sort(got.begin(), got.end(), std::greater<>());
    if (got.size() == kTop) {  // else two alternatives share a text (an object keeps one)
      for (size_t k = 0; k < kTop; ++k) EXPECT_NEAR(got[k], top[k] - lse, 1e-3) << "position " << p << " alt " << k;
      ++compared;
    }
    const double own = lp["token_logprobs"][i].GetDouble();
    EXPECT_LE(own, top[0] - lse + 1e-3) << p;
    const auto& ids = ref.logits.topk_ids[p - 1];
    if (const auto it = std::find(ids.begin(), ids.end(), ref.ids[p]); it != ids.end()) {
      EXPECT_NEAR(own, top[static_cast<size_t>(it - ids.begin())] - lse, 1e-3) << p;
    }
  }
  EXPECT_GT(compared, ref.ids.size() * 9 / 10);
  // Never a prefix-cache hit: a resent prompt computes every row again, with the same answer.
  const HttpReply again = post_completion(plain_->port(), echo_body(ref.ids, 0, kTop));
  rapidjson::Document d2 = parse_ok(again);
  EXPECT_EQ(d2["usage"]["prompt_tokens_details"]["cached_tokens"].GetUint(), 0u);
  EXPECT_EQ(again.body.substr(again.body.find("\"choices\"")), reply.body.substr(reply.body.find("\"choices\"")));
}

// The logprob a token gets when generated is the logprob it gets as a prompt token (the same
// logits row; 1e-4: a decode row and a prefill row differ only in summation order).
TEST_F(PromptLogprobsE2E, PromptLogprobsEqualTheGeneratedOnes) {
  const ReferencePrompt ref = load_reference_prompt("chat_basic");
  for (ServerProcess* server : {plain_, spec_}) {
    rapidjson::Document gen =
        parse_ok(post_completion(server->port(), greedy_completion_body(ref.ids, ref.ids.size(), 6)));
    const rapidjson::Value& glp = gen["choices"][0]["logprobs"];
    ASSERT_EQ(glp["token_logprobs"].Size(), 6u);
    // The generated ids, from a second request that echoes them as text is not exact: rebuild
    // them from the reference's greedy tokens (the f32 CPU path reproduces them).
    std::vector<int32_t> ids = ref.ids;
    ids.insert(ids.end(), ref.greedy_tokens.begin(), ref.greedy_tokens.begin() + 6);
    rapidjson::Document echo = parse_ok(post_completion(server->port(), echo_body(ids, 2, 1)));
    const rapidjson::Value& elp = echo["choices"][0]["logprobs"];
    ASSERT_EQ(elp["token_logprobs"].Size(), ids.size() + 2);
    for (rapidjson::SizeType k = 0; k < 6; ++k) {
      EXPECT_STREQ(elp["tokens"][static_cast<rapidjson::SizeType>(ref.ids.size()) + k].GetString(),
                   glp["tokens"][k].GetString());
      EXPECT_NEAR(elp["token_logprobs"][static_cast<rapidjson::SizeType>(ref.ids.size()) + k].GetDouble(),
                  glp["token_logprobs"][k].GetDouble(), 1e-4)
          << "generated token " << k;
    }
    // Offsets run through the prompt into the completion; the text is the echo plus 2 tokens.
    const rapidjson::Value& off = elp["text_offset"];
    for (rapidjson::SizeType k = 1; k < off.Size(); ++k) EXPECT_GE(off[k].GetUint(), off[k - 1].GetUint());
    EXPECT_EQ(echo["usage"]["completion_tokens"].GetUint(), 2u);
  }
}

// Streaming: the first chunk carries the echo and the prompt's logprobs; n = 3 hands choice 0's
// prompt logprobs to every choice.
TEST_F(PromptLogprobsE2E, StreamingAndChoicesCarryThePromptLogprobs) {
  const ReferencePrompt ref = load_reference_prompt("chat_basic");
  std::string body = echo_body(ref.ids, 3, 2);
  body.back() = ',';
  const HttpReply streamed = post_completion(plain_->port(), body + R"( "stream": true})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::vector<std::string> events = sse_events(streamed.body);
  ASSERT_GE(events.size(), 2u);
  rapidjson::Document first;
  first.Parse(events[0].c_str());
  ASSERT_FALSE(first.HasParseError()) << events[0];
  EXPECT_GE(first["choices"][0]["logprobs"]["tokens"].Size(), ref.ids.size());
  EXPECT_TRUE(first["choices"][0]["logprobs"]["token_logprobs"][0].IsNull());

  rapidjson::Document three = parse_ok(post_completion(plain_->port(), body + R"( "n": 3})"));
  ASSERT_EQ(three["choices"].Size(), 3u);
  const rapidjson::Value& lp0 = three["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(lp0.Size(), ref.ids.size() + 3);
  for (rapidjson::SizeType i = 1; i < 3; ++i) {
    const rapidjson::Value& lpi = three["choices"][i]["logprobs"]["token_logprobs"];
    ASSERT_EQ(lpi.Size(), lp0.Size()) << i;
    for (rapidjson::SizeType k = 1; k < lp0.Size(); ++k) EXPECT_NEAR(lpi[k].GetDouble(), lp0[k].GetDouble(), 1e-6);
  }
}

}  // namespace
}  // namespace ds::test
