// Structured outputs end to end (`deltaserve serve`, CPU workers, real HTTP, the tiny random-
// weight fixture): greedy and temperature-1 generations under a set of schemas are valid JSON
// for an independent validator (tests/e2e/validate_json.py: Python's jsonschema, not our
// matcher), 100%; regex / choice / json_object; a forced tool call whose arguments validate;
// a reasoning block before the constraint; greedy output identical with --spec-k 3; 64
// concurrent constrained streams; a schema we cannot enforce is a 400 naming its keyword.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/server_process.h"
#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

// Bounded schemas: a random-weight model wanders, so every string, array and number has a
// limit and every generation can finish inside max_tokens.
const std::vector<std::string> kSchemas = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3}},"required":["name","age","tags"],"additionalProperties":false})",
    R"({"type":"array","items":{"type":"integer","minimum":-50,"maximum":50},"minItems":1,"maxItems":4})",
    R"({"anyOf":[{"type":"boolean"},{"type":"null"},{"enum":["red","green"]}]})",
    R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"ok":{"const":true}},"required":["id","ok"],"additionalProperties":false})",
    R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},"next":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/node"}]}},"required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
    R"({"type":"object","properties":{"when":{"type":"string","format":"date"},"score":{"type":"number","minimum":0,"maximum":1}},"required":["when","score"],"additionalProperties":false})",
};

std::string escape(const std::string& s) {
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return b.GetString();
}

std::string chat_body(const std::string& extra, double temperature, int seed, int max_tokens = 200) {
  return R"({"messages":[{"role":"user","content":"Give me the data."}],"temperature":)" + std::to_string(temperature) +
         R"(,"seed":)" + std::to_string(seed) + R"(,"max_tokens":)" + std::to_string(max_tokens) +
         R"(,"chat_template_kwargs":{"enable_thinking":false},)" + extra + "}";
}

std::string schema_format(const std::string& schema) {
  return R"("response_format":{"type":"json_schema","json_schema":{"name":"t","strict":true,"schema":)" + schema + "}}";
}

struct Choice {
  int status = 0;
  std::string content, reasoning, finish, body;
};

Choice post_chat(int port, const std::string& body) {
  const HttpReply r = http_request(port, "POST", "/v1/chat/completions", body);
  Choice c;
  c.status = r.status;
  c.body = r.body;
  if (r.status != 200) return c;
  rapidjson::Document d;
  d.Parse(r.body.c_str());
  const auto& ch = d["choices"][0];
  const auto& m = ch["message"];
  if (m.HasMember("content") && m["content"].IsString()) c.content = m["content"].GetString();
  if (m.HasMember("reasoning_content") && m["reasoning_content"].IsString()) {
    c.reasoning = m["reasoning_content"].GetString();
  }
  c.finish = ch["finish_reason"].GetString();
  return c;
}

// The validator's verdict per (schema, text): "ok" or "invalid: ...".
std::vector<std::string> validate(const std::vector<std::pair<std::string, std::string>>& items) {
  const std::string in = ::testing::TempDir() + "structured_e2e_items.jsonl";
  {
    std::ofstream f(in);
    for (const auto& [schema, text] : items) f << R"({"schema":)" << schema << R"(,"text":)" << escape(text) << "}\n";
  }
  const std::string cmd = std::string("python3 ") + DS_VALIDATOR + " " + in + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p != nullptr && fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int rc = p == nullptr ? -1 : pclose(p);
  EXPECT_EQ(rc, 0) << "the validator failed (is python3-jsonschema installed? scripts/setup.sh): " << out;
  std::vector<std::string> verdicts;
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);) verdicts.push_back(l);
  return verdicts;
}

class StructuredE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::vector<std::string> common{
        "--model", tiny_model_path(),    "--workers", "1", "--port", "0", "--threads", "2", "--max-seqs",
        "64",      "--max-batch-tokens", "512"};
    // The plain server is a two-stage pipeline (the masks ride the plan to the last stage); the
    // speculating one a single worker.
    std::vector<std::string> pipeline = common;
    pipeline[3] = "2";
    pipeline[7] = "1";
    plain_ = new ServerProcess(pipeline);
    std::vector<std::string> spec = common;
    spec.insert(spec.end(), {"--spec-k", "3"});
    spec_ = new ServerProcess(spec);
  }
  static void TearDownTestSuite() { stop_servers({&plain_, &spec_}); }
  static ServerProcess* plain_;
  static ServerProcess* spec_;
};
ServerProcess* StructuredE2E::plain_ = nullptr;
ServerProcess* StructuredE2E::spec_ = nullptr;

TEST_F(StructuredE2E, GreedyAndSampledOutputsFollowTheirSchemas) {
  std::vector<std::pair<std::string, std::string>> items;
  for (const std::string& schema : kSchemas) {
    for (int run = 0; run < 4; ++run) {  // greedy, then 3 seeds at temperature 1
      const Choice c = post_chat(plain_->port(), chat_body(schema_format(schema), run == 0 ? 0.0 : 1.0, run));
      ASSERT_EQ(c.status, 200) << c.body;
      EXPECT_EQ(c.finish, "stop") << schema << " -> " << c.content;
      items.emplace_back(schema, c.content);
    }
  }
  const std::vector<std::string> verdicts = validate(items);
  ASSERT_EQ(verdicts.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(verdicts[i], "ok") << items[i].first << "\n  output: " << items[i].second;
  }
}

TEST_F(StructuredE2E, RegexChoiceAndJsonObjectOnBothRoutes) {
  const Choice choice =
      post_chat(plain_->port(), chat_body(R"("structured_outputs":{"choice":["alpha","beta"]})", 1.0, 3));
  ASSERT_EQ(choice.status, 200) << choice.body;
  EXPECT_TRUE(choice.content == "alpha" || choice.content == "beta") << choice.content;
  const std::string completion = R"({"prompt":"The code is ","max_tokens":40,"temperature":1,"seed":5,)"
                                 R"("structured_outputs":{"regex":"[A-Z]{3}-[0-9]{2,4}"}})";
  const HttpReply r = post_completion(plain_->port(), completion);
  ASSERT_EQ(r.status, 200) << r.body;
  rapidjson::Document d;
  d.Parse(r.body.c_str());
  const std::string text = d["choices"][0]["text"].GetString();
  EXPECT_TRUE(std::regex_match(text, std::regex("[A-Z]{3}-[0-9]{2,4}"))) << text;
  EXPECT_STREQ(d["choices"][0]["finish_reason"].GetString(), "stop");
  const Choice obj = post_chat(plain_->port(), chat_body(R"("response_format":{"type":"json_object"})", 0.0, 0, 60));
  ASSERT_EQ(obj.status, 200) << obj.body;
  // Any object is valid; cut by max_tokens it must say "length", never a silent "stop".
  if (obj.finish == "stop") {
    EXPECT_EQ(validate({{R"({"type":"object"})", obj.content}}).at(0), "ok") << obj.content;
  } else {
    EXPECT_EQ(obj.finish, "length") << obj.body;
  }
}

TEST_F(StructuredE2E, MaxTokensCutsWithLength) {
  const Choice c = post_chat(plain_->port(), chat_body(schema_format(kSchemas[0]), 0.0, 0, 3));
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.finish, "length");
}

TEST_F(StructuredE2E, ANamedToolCallHasArgumentsThatFollowItsParameters) {
  const std::string params =
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":10},"days":{"type":"integer","minimum":1,"maximum":7},"unit":{"enum":["c","f"]}},"required":["city","days"]})";
  const std::string body =
      chat_body(R"("tools":[{"type":"function","function":{"name":"weather","parameters":)" + params +
                    R"(}},{"type":"function","function":{"name":"other"}}],)"
                    R"("tool_choice":{"type":"function","function":{"name":"weather"}})",
                1.0, 11, 150);
  for (int seed = 0; seed < 3; ++seed) {
    std::string b = body;
    b.replace(b.find("\"seed\":11"), 9, "\"seed\":" + std::to_string(seed + 11));
    const HttpReply r = http_request(plain_->port(), "POST", "/v1/chat/completions", b);
    ASSERT_EQ(r.status, 200) << r.body;
    rapidjson::Document d;
    d.Parse(r.body.c_str());
    const auto& ch = d["choices"][0];
    ASSERT_STREQ(ch["finish_reason"].GetString(), "tool_calls") << r.body;
    const auto& call = ch["message"]["tool_calls"][0]["function"];
    EXPECT_STREQ(call["name"].GetString(), "weather");
    EXPECT_EQ(validate({{params, call["arguments"].GetString()}}).at(0), "ok") << r.body;
  }
}

TEST_F(StructuredE2E, TheConstraintStartsAfterTheReasoningBlock) {
  // A large bias on </think> makes the random model close its (empty) reasoning at once; the
  // grammar then owns the content, and the reasoning stays out of it.
  const HttpReply tok = http_request(plain_->port(), "POST", "/tokenize", R"({"prompt":"</think>"})");
  ASSERT_EQ(tok.status, 200) << tok.body;
  rapidjson::Document t;
  t.Parse(tok.body.c_str());
  ASSERT_EQ(t["tokens"].Size(), 1u) << tok.body;
  const int think_end = t["tokens"][0].GetInt();
  std::string body =
      chat_body(schema_format(kSchemas[1]) + R"(,"logit_bias":{")" + std::to_string(think_end) + R"(":100})", 0.0, 0);
  body.replace(body.find("\"enable_thinking\":false"), 23, "\"enable_thinking\":true");
  const Choice c = post_chat(plain_->port(), body);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.finish, "stop") << c.body;
  EXPECT_EQ(validate({{kSchemas[1], c.content}}).at(0), "ok") << c.body;
}

TEST_F(StructuredE2E, SpeculationGivesTheSameGreedyOutput) {
  for (const std::string& schema : kSchemas) {
    const std::string body = chat_body(schema_format(schema), 0.0, 0);
    const Choice a = post_chat(plain_->port(), body);
    const Choice b = post_chat(spec_->port(), body);
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(b.content, a.content) << schema;
    EXPECT_EQ(b.finish, a.finish) << schema;
  }
}

TEST_F(StructuredE2E, SixtyFourConcurrentConstrainedStreams) {
  std::vector<Choice> got(64);
  std::vector<std::thread> threads;
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&, i] {
      std::string body =
          chat_body(schema_format(kSchemas[static_cast<size_t>(i) % kSchemas.size()]), 1.0, 100 + i, 150);
      body.insert(body.size() - 1, R"(,"stream":false)");
      got[static_cast<size_t>(i)] = post_chat(plain_->port(), body);
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::pair<std::string, std::string>> items;
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(got[static_cast<size_t>(i)].status, 200) << got[static_cast<size_t>(i)].body;
    EXPECT_EQ(got[static_cast<size_t>(i)].finish, "stop");
    items.emplace_back(kSchemas[static_cast<size_t>(i) % kSchemas.size()], got[static_cast<size_t>(i)].content);
  }
  const std::vector<std::string> verdicts = validate(items);
  ASSERT_EQ(verdicts.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(verdicts[i], "ok") << items[i].second;
}

TEST_F(StructuredE2E, SchemasWeCannotEnforceAreRefusedNamingTheKeyword) {
  const Choice c =
      post_chat(plain_->port(), chat_body(schema_format(R"({"type":"array","uniqueItems":true})"), 0.0, 0));
  EXPECT_EQ(c.status, 400) << c.body;
  EXPECT_NE(c.body.find("uniqueItems"), std::string::npos) << c.body;
  EXPECT_NE(c.body.find("response_format"), std::string::npos) << c.body;
  const Choice both = post_chat(plain_->port(), chat_body(R"("response_format":{"type":"json_object"},)"
                                                          R"("structured_outputs":{"regex":"a+"})",
                                                          0.0, 0));
  EXPECT_EQ(both.status, 400) << both.body;
  const Choice bad_regex = post_chat(plain_->port(), chat_body(R"("structured_outputs":{"regex":"(a"})", 0.0, 0));
  EXPECT_EQ(bad_regex.status, 400) << bad_regex.body;
}

}  // namespace
}  // namespace ds::test
