// The non-generation routes, routing errors, API-key auth and /metrics.
#include "coordinator/openai/response_json.h"
#include "tests/coordinator/openai/service_fixture.h"

namespace ds::test {
namespace {

const std::string kChat = R"({"messages":[{"role":"user","content":"hi"}]})";

TEST_F(ServiceTest, Models) {
  auto r = call("GET", "/v1/models");
  ASSERT_EQ(r->status(), 200);
  auto d = json(r->body());
  EXPECT_EQ(str(d["object"]), "list");
  ASSERT_EQ(d["data"].Size(), 1u);
  EXPECT_EQ(str(d["data"][0]["id"]), "tiny");
  EXPECT_EQ(str(d["data"][0]["object"]), "model");
  EXPECT_EQ(str(d["data"][0]["owned_by"]), "deltaserve");
  EXPECT_EQ(d["data"][0]["max_model_len"].GetUint(), 4096u);
}

TEST_F(ServiceTest, HealthAndReadiness) {
  EXPECT_EQ(call("GET", "/health")->status(), 200);
  EXPECT_EQ(call("GET", "/ready")->status(), 200);
  engine_.set_health({false, 2, 1, 0, 0, 0, 4096});
  auto r = call("GET", "/ready");
  EXPECT_EQ(r->status(), 503);
  EXPECT_NE(r->body().find("1 of 2 workers"), std::string::npos) << r->body();
  EXPECT_EQ(call("GET", "/health")->status(), 200);  // liveness does not depend on workers
}

TEST_F(ServiceTest, UnknownRouteIs404AndWrongMethodIs405) {
  auto r = call("GET", "/v2/everything");
  EXPECT_EQ(r->status(), 404);
  EXPECT_TRUE(json(r->body())["error"].IsObject());
  r = call("GET", "/v1/chat/completions");
  EXPECT_EQ(r->status(), 405);
  EXPECT_EQ(r->header("Allow"), "POST");
  EXPECT_TRUE(json(r->body())["error"].IsObject());
  EXPECT_EQ(call("DELETE", "/v1/models")->status(), 405);
}

TEST_F(ServiceTest, Tokenize) {
  auto r = post("/tokenize", R"({"model":"tiny","prompt":"Hello world"})");
  ASSERT_EQ(r->status(), 200) << r->body();
  auto d = json(r->body());
  EXPECT_EQ(d["count"].GetUint(), 2u);
  EXPECT_EQ(d["tokens"][0].GetInt(), 9707);
  EXPECT_EQ(d["tokens"][1].GetInt(), 1879);
  EXPECT_EQ(d["max_model_len"].GetUint(), 4096u);
  EXPECT_TRUE(d["token_strs"].IsNull());

  r = post("/tokenize", R"({"prompt":"Hello world","return_token_strs":true})");
  d = json(r->body());
  EXPECT_EQ(str(d["token_strs"][1]), " world");

  // Chat form: the rendered template, control tokens included.
  r = post("/tokenize", kChat);
  ASSERT_EQ(r->status(), 200) << r->body();
  d = json(r->body());
  EXPECT_GT(d["count"].GetUint(), 3u);
  EXPECT_EQ(d["tokens"][0].GetInt(), *tok().find_token("<|im_start|>"));

  EXPECT_EQ(post("/tokenize", R"({"text":"x"})")->status(), 400);
}

TEST_F(ServiceTest, Detokenize) {
  auto r = post("/detokenize", R"({"tokens":[9707,1879]})");
  ASSERT_EQ(r->status(), 200) << r->body();
  EXPECT_EQ(str(json(r->body())["prompt"]), "Hello world");
  r = post("/detokenize", R"({"tokens":[9707,-4]})");
  EXPECT_EQ(r->status(), 400);
  EXPECT_EQ(str(json(r->body())["error"]["param"]), "tokens");
  EXPECT_EQ(post("/detokenize", R"({"tokens":"9707"})")->status(), 400);
}

class AuthTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    options_.api_key = "s3cret-key";
    make_service();
    script("ok");
  }
};

TEST_F(AuthTest, MissingKeyIs401) {
  auto r = call("POST", "/v1/chat/completions", kChat);
  EXPECT_EQ(r->status(), 401);
  auto d = json(r->body());
  EXPECT_EQ(str(d["error"]["code"]), "invalid_api_key");
  EXPECT_EQ(call("GET", "/v1/models")->status(), 401);
  EXPECT_EQ(call("GET", "/metrics")->status(), 401);
  EXPECT_TRUE(engine_.submitted().empty());
}

TEST_F(AuthTest, WrongKeyIs401) {
  for (const char* value :
       {"Bearer s3cret-kez", "Bearer s3cret-key2", "Bearer s3cret", "Basic s3cret-key", "s3cret-key", "Bearer "}) {
    EXPECT_EQ(call("GET", "/v1/models", "", {{"authorization", value}})->status(), 401) << value;
  }
}

TEST_F(AuthTest, GoodKeyPasses) {
  EXPECT_EQ(call("GET", "/v1/models", "", {{"authorization", "Bearer s3cret-key"}})->status(), 200);
  EXPECT_EQ(call("GET", "/v1/models", "", {{"authorization", "bearer s3cret-key"}})->status(), 200);
  EXPECT_EQ(call("POST", "/v1/chat/completions", kChat, {{"authorization", "Bearer s3cret-key"}})->status(), 200);
}

TEST_F(AuthTest, HealthNeedsNoKey) {
  EXPECT_EQ(call("GET", "/health")->status(), 200);
}

TEST_F(ServiceTest, MetricsCountRequestsAndTokens) {
  script("Hello there");
  ASSERT_EQ(post("/v1/chat/completions", kChat)->status(), 200);
  ASSERT_EQ(post("/v1/chat/completions", R"({"messages":[], "x":1})")->status(), 400);
  ASSERT_EQ(call("GET", "/nope")->status(), 404);
  engine_.set_health({true, 3, 2, 5, 7, 4, 4096});
  auto r = call("GET", "/metrics");
  ASSERT_EQ(r->status(), 200);
  EXPECT_EQ(r->content_type().rfind("text/plain", 0), 0u);
  const std::string m = r->body();
  const size_t prompt = engine_.submitted()[0].prompt_ids.size();
  const size_t generated = ids("Hello there").size() + 1;
  for (const std::string& line : {
           std::string("deltaserve:http_requests_total{status=\"200\"} 1"),
           std::string("deltaserve:http_requests_total{status=\"400\"} 1"),
           std::string("deltaserve:http_requests_total{status=\"404\"} 1"),
           "deltaserve:prompt_tokens_total " + std::to_string(prompt),
           "deltaserve:generation_tokens_total " + std::to_string(generated),
           std::string("deltaserve:request_success_total{finished_reason=\"stop\"} 1"),
           std::string("deltaserve:time_to_first_token_seconds_count 1"),
           "deltaserve:inter_token_latency_seconds_count " + std::to_string(generated - 1),
           std::string("deltaserve:e2e_request_latency_seconds_count 1"),
           std::string("deltaserve:num_requests_waiting 7"),
           std::string("deltaserve:num_requests_running 4"),
           std::string("deltaserve:workers_total 3"),
           std::string("deltaserve:workers_up 2"),
           std::string("deltaserve:worker_restarts_total 5"),
           std::string("# TYPE deltaserve:time_to_first_token_seconds histogram"),
           std::string("deltaserve:time_to_first_token_seconds_bucket{le=\"+Inf\"} 1"),
       }) {
    EXPECT_NE(m.find(line + "\n"), std::string::npos) << "missing: " << line << "\n" << m;
  }
}

}  // namespace
}  // namespace ds::test

namespace ds::test {
namespace {

// Admission control: a full engine queue is answered 429 + Retry-After before the body is
// even parsed (so nothing is tokenized or submitted).
TEST_F(ServiceTest, FullQueueIs429WithRetryAfter) {
  options_.max_queue = 3;
  EngineHealth h{true, 1, 1, 0, 3, 2, 4096};
  engine_.set_health(h);
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    for (const std::string& body : {std::string(R"({"prompt": "hello", "max_tokens": 4})"), std::string("not json")}) {
      auto r = post(path, body);
      ASSERT_EQ(r->status(), 429) << path << " " << r->body();
      EXPECT_EQ(r->header("Retry-After"), "1");
      auto d = json(r->body());
      EXPECT_EQ(str(d["error"]["type"]), "rate_limit_error");
      EXPECT_EQ(str(d["error"]["code"]), "rate_limit_exceeded");
    }
  }
  EXPECT_TRUE(engine_.submitted().empty());
  EXPECT_EQ(metrics_.status_count(429), 4u);

  // One slot below the limit: admitted again.
  h.queue_depth = 2;
  engine_.set_health(h);
  script("Hello there");
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "hello", "max_tokens": 4})")->status(), 200);
  // 0 turns admission control off.
  options_.max_queue = 0;
  h.queue_depth = 100000;
  engine_.set_health(h);
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "hello", "max_tokens": 4})")->status(), 200);
  EXPECT_EQ(engine_.submitted().size(), 2u);
}

TEST_F(ServiceTest, MetricsExportCacheAndSlotGauges) {
  EngineHealth h{true, 2, 2, 0, 1, 3, 4096};
  h.kv_blocks_total = 512;
  h.kv_blocks_used = 40;
  h.kv_block_size = 16;
  h.kv_cache_type = "q8_0/f16";
  h.kv_bytes_per_token = 19584;
  h.slots_total = 8;
  h.slots_used = 3;
  h.preemptions = 5;
  h.prefix_cache_queried_tokens = 1000;
  h.prefix_cache_hit_tokens = 640;
  h.steps = 42;
  h.step_host_seconds = 0.25;
  h.step_wait_seconds = 1.5;
  engine_.set_health(h);
  const std::string m = call("GET", "/metrics")->body();
  for (const char* line :
       {"deltaserve:num_requests_waiting 1", "deltaserve:num_requests_running 3", "deltaserve:kv_blocks_total 512",
        "deltaserve:kv_blocks_used 40", "deltaserve:kv_cache_usage_perc 0.078125", "deltaserve:gdn_slots_total 8",
        "deltaserve:kv_cache_info{type=\"q8_0/f16\"} 1", "deltaserve:kv_cache_bytes_per_token 19584",
        "deltaserve:kv_cache_capacity_bytes 160432128", "deltaserve:gdn_slots_used 3",
        "deltaserve:num_preemptions_total 5", "deltaserve:prefix_cache_queried_tokens_total 1000",
        "deltaserve:prefix_cache_hit_tokens_total 640", "deltaserve:engine_steps_total 42",
        "deltaserve:engine_host_seconds_total 0.25", "deltaserve:engine_wait_seconds_total 1.5",
        "# TYPE deltaserve:engine_host_seconds_total counter", "# TYPE deltaserve:num_preemptions_total counter",
        "# TYPE deltaserve:kv_blocks_used gauge"}) {
    EXPECT_NE(m.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << m;
  }
}

TEST(ResponseJson, UsageReportsCachedTokens) {
  const openai::ResponseMeta meta{"cmpl-1", "tiny", 1};
  const std::string body = openai::completion_json(meta, "hi", "stop", {}, openai::Usage{10, 2, 8});
  rapidjson::Document d;
  d.Parse(body.c_str());
  ASSERT_FALSE(d.HasParseError()) << body;
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetUint(), 10u);
  EXPECT_EQ(d["usage"]["total_tokens"].GetUint(), 12u);
  EXPECT_EQ(d["usage"]["prompt_tokens_details"]["cached_tokens"].GetUint(), 8u);
  const std::string chunk = openai::usage_chunk_json(meta, "text_completion", openai::Usage{10, 2, 0});
  d.Parse(chunk.c_str());
  EXPECT_EQ(d["usage"]["prompt_tokens_details"]["cached_tokens"].GetUint(), 0u);
}

}  // namespace
}  // namespace ds::test
