// The hybrid prefix cache end to end: `deltaserve serve` with 2 CPU workers and the cache on
// (the default) against a server with it off (--prefix-cache-snapshots 0). A resent long prompt
// and the second turn of a chat must reuse cached tokens (the Prometheus counter
// deltaserve:prefix_cache_hit_tokens_total grows) and still produce exactly the greedy output of
// the server that recomputes everything.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <set>

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

// choices[0] of a reply, re-serialized: text / message, finish reason (no ids or timestamps).
std::string first_choice(const HttpReply& r) {
  EXPECT_EQ(r.status, 200) << r.body;
  rapidjson::Document d = parse(r.body);
  if (!d.IsObject() || !d.HasMember("choices") || d["choices"].Empty()) return "";
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> w(out);
  d["choices"][0].Accept(w);
  return out.GetString();
}

// usage.prompt_tokens_details.cached_tokens of a reply (-1 when absent).
int64_t cached_tokens(const HttpReply& r) {
  rapidjson::Document d = parse(r.body);
  if (!d.IsObject() || !d.HasMember("usage") || !d["usage"].HasMember("prompt_tokens_details")) return -1;
  return d["usage"]["prompt_tokens_details"]["cached_tokens"].GetInt64();
}

double hit_tokens(int port) {
  const double hits = metric_value(port, "deltaserve:prefix_cache_hit_tokens_total");
  EXPECT_GE(hits, 0) << "deltaserve:prefix_cache_hit_tokens_total missing from /metrics";
  return hits;
}

class PrefixCacheE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cached_ = new ServerProcess({"--model", tiny_model_path(), "--workers", "2", "--port", "0", "--threads", "1"});
    plain_ = new ServerProcess(
        {"--model", tiny_model_path(), "--workers", "1", "--port", "0", "--prefix-cache-snapshots", "0"});
  }
  static void TearDownTestSuite() { stop_servers({&cached_, &plain_}); }
  static ServerProcess* cached_;
  static ServerProcess* plain_;
};
ServerProcess* PrefixCacheE2E::cached_ = nullptr;
ServerProcess* PrefixCacheE2E::plain_ = nullptr;

TEST_F(PrefixCacheE2E, ResentLongPromptHitsAndMatches) {
  const ReferencePrompt ref = load_reference_prompt("rand_1500");
  const std::string body = R"({"prompt": )" + ids_json(ref.ids) + R"(, "max_tokens": 24, "temperature": 0})";
  const double before = hit_tokens(cached_->port());
  const HttpReply first_reply = post_completion(cached_->port(), body);
  const std::string first = first_choice(first_reply);
  const double after_first = hit_tokens(cached_->port());
  const HttpReply second_reply = post_completion(cached_->port(), body);
  const std::string second = first_choice(second_reply);
  const double after_second = hit_tokens(cached_->port());
  EXPECT_EQ(cached_tokens(first_reply), 0);
  EXPECT_EQ(cached_tokens(second_reply), 1488) << "usage.prompt_tokens_details.cached_tokens";
  // The streaming usage chunk reports it too.
  const std::string stream_body = R"({"prompt": )" + ids_json(ref.ids) +
                                  R"(, "max_tokens": 4, "temperature": 0, "stream": true,
                                      "stream_options": {"include_usage": true}})";
  const HttpReply streamed = post_completion(cached_->port(), stream_body);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::vector<std::string> events = sse_events(streamed.body);
  ASSERT_GE(events.size(), 2u);
  rapidjson::Document usage = parse(events[events.size() - 2]);
  ASSERT_TRUE(usage.IsObject() && usage.HasMember("usage")) << events[events.size() - 2];
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"].GetInt(), 1488);
  const std::string uncached = first_choice(post_completion(plain_->port(), body));

  EXPECT_EQ(after_first, before) << "nothing of this prompt was cached yet";
  // The prompt snapshot sits at the last block boundary before its end: 1500 -> 1488 (block 16).
  EXPECT_EQ(after_second - after_first, 1488);
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(second, first);
  EXPECT_EQ(uncached, first);
  EXPECT_EQ(hit_tokens(plain_->port()), 0) << "the cache is off on the plain server";
}

TEST_F(PrefixCacheE2E, SecondChatTurnHitsAndMatches) {
  const std::string question = R"({"role": "user", "content": "Hello! What is the capital of Korea?"})";
  const HttpReply turn1 = http_request(cached_->port(), "POST", "/v1/chat/completions",
                                       R"({"messages": [)" + question + R"(], "max_tokens": 20, "temperature": 0})");
  ASSERT_EQ(turn1.status, 200) << turn1.body;
  rapidjson::Document d = parse(turn1.body);
  const auto& msg = d["choices"][0]["message"];
  const std::string reply = msg.HasMember("content") && msg["content"].IsString() ? msg["content"].GetString() : "";
  rapidjson::StringBuffer reply_json;
  rapidjson::Writer<rapidjson::StringBuffer> w(reply_json);
  w.String(reply.c_str(), static_cast<rapidjson::SizeType>(reply.size()));

  const std::string body = R"({"messages": [)" + question + R"(, {"role": "assistant", "content": )" +
                           reply_json.GetString() +
                           R"(}, {"role": "user", "content": "And the capital of Japan? Answer in one word."}],
                               "max_tokens": 20, "temperature": 0})";
  const double before = hit_tokens(cached_->port());
  const std::string cached = first_choice(http_request(cached_->port(), "POST", "/v1/chat/completions", body));
  EXPECT_GE(hit_tokens(cached_->port()) - before, 16) << "turn 2 reuses at least turn 1's prompt blocks";
  const std::string uncached = first_choice(http_request(plain_->port(), "POST", "/v1/chat/completions", body));
  EXPECT_FALSE(cached.empty());
  EXPECT_EQ(cached, uncached);
}

// n > 1 prefills the prompt once: choices 1..n-1 start after choice 0 and reuse its blocks and
// GDN snapshot, so the server computes the prompt once plus each choice's last partial block
// (queried - hit tokens, from /metrics). Greedy choices are each the n = 1 output; with a seed,
// sampled choices are reproducible one by one.
TEST_F(PrefixCacheE2E, ChoicesShareOnePrefill) {
  const ReferencePrompt ref = load_reference_prompt("rand_1500");
  const std::vector<int32_t> prompt(ref.ids.begin() + 100, ref.ids.begin() + 403);  // 303 tokens, fresh
  const std::string greedy = R"({"prompt": )" + ids_json(prompt) + R"(, "max_tokens": 12, "temperature": 0)";
  const double queried0 = metric_value(cached_->port(), "deltaserve:prefix_cache_queried_tokens_total");
  const double hit0 = hit_tokens(cached_->port());
  const HttpReply four = post_completion(cached_->port(), greedy + R"(, "n": 4})");
  ASSERT_EQ(four.status, 200) << four.body;
  const double computed = metric_value(cached_->port(), "deltaserve:prefix_cache_queried_tokens_total") - queried0 -
                          (hit_tokens(cached_->port()) - hit0);
  EXPECT_LE(computed, 303 + 3 * 16) << "one prefill, and each later choice's last partial block";
  rapidjson::Document d = parse(four.body);
  ASSERT_EQ(d["choices"].Size(), 4u);
  const std::string single = first_choice(post_completion(plain_->port(), greedy + "}"));
  rapidjson::Document one = parse(R"({"choices": [)" + single + "]}");
  for (rapidjson::SizeType i = 0; i < 4; ++i) {
    EXPECT_EQ(d["choices"][i]["index"].GetUint(), i);
    EXPECT_STREQ(d["choices"][i]["text"].GetString(), one["choices"][0]["text"].GetString()) << i;
  }
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetUint(), 303u);
  EXPECT_EQ(d["usage"]["completion_tokens"].GetUint(), 48u);

  const std::string sampled = R"({"prompt": )" + ids_json(prompt) +
                              R"(, "max_tokens": 8, "temperature": 1, "seed": 7, "n": 3, "ignore_eos": true})";
  const HttpReply a = post_completion(cached_->port(), sampled), b = post_completion(cached_->port(), sampled);
  rapidjson::Document da = parse(a.body), db = parse(b.body);
  ASSERT_EQ(da["choices"].Size(), 3u) << a.body;
  ASSERT_EQ(db["choices"].Size(), 3u) << b.body;
  std::set<std::string> texts;
  for (rapidjson::SizeType i = 0; i < 3; ++i) {
    EXPECT_STREQ(da["choices"][i]["text"].GetString(), db["choices"][i]["text"].GetString()) << "choice " << i;
    texts.insert(da["choices"][i]["text"].GetString());
  }
  EXPECT_EQ(texts.size(), 3u) << "each choice samples with its own seed";
}

}  // namespace
}  // namespace ds::test
