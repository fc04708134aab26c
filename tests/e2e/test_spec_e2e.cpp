// MTP speculative decoding end to end (`deltaserve serve`, 2 CPU workers, real HTTP): greedy
// output with --spec-k 3 is token for token the output with --spec-k 0, on the fixture
// prompts one at a time and on 16 concurrent requests (speculating verify rows batched with
// prefill chunks of other requests); the usage extension and /metrics report the drafts.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <signal.h>

#include <map>
#include <set>
#include <thread>

#include "tests/e2e/completion_reply.h"
#include "tests/e2e/server_process.h"
#include "tests/testutil/reference.h"
#include "tests/testutil/testutil.h"
#include "tests/testutil/vision_reference.h"

namespace ds::test {
namespace {

std::string prefix_json(const std::vector<int32_t>& ids, size_t n) {
  return ids_json(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n)));
}

class SpecE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::vector<std::string> common{
        "--model", tiny_model_path(),    "--workers", "2", "--port", "0", "--threads", "1", "--max-seqs",
        "8",       "--max-batch-tokens", "256"};
    std::vector<std::string> spec = common;
    spec.insert(spec.end(), {"--spec-k", "3"});
    std::vector<std::string> part_vocab = common;
    part_vocab.insert(part_vocab.end(), {"--spec-k", "2", "--draft-vocab", "2000"});
    plain_ = new ServerProcess(common);
    spec_ = new ServerProcess(spec);
    part_vocab_ = new ServerProcess(part_vocab);
  }
  static void TearDownTestSuite() { stop_servers({&plain_, &spec_, &part_vocab_}); }
  static ServerProcess* plain_;
  static ServerProcess* spec_;
  static ServerProcess* part_vocab_;  // drafts among the first 2000 ids (Assign.draft_vocab)
};
ServerProcess* SpecE2E::plain_ = nullptr;
ServerProcess* SpecE2E::spec_ = nullptr;
ServerProcess* SpecE2E::part_vocab_ = nullptr;

// --draft-vocab reaches the last worker (Assign) and leaves the output as it is.
TEST_F(SpecE2E, DraftVocabularyKeepsTheOutput) {
  const std::vector<int32_t> ids = load_reference_prompt("chat_basic").ids;
  const std::string body = greedy_completion_body(ids, ids.size(), 40);
  const HttpReply want = post_completion(plain_->port(), body);
  const HttpReply got = post_completion(part_vocab_->port(), body);
  ASSERT_EQ(want.status, 200) << want.body;
  EXPECT_EQ(completion_outcome(got), completion_outcome(want));
  rapidjson::Document d;
  d.Parse(got.body.c_str());
  ASSERT_TRUE(d["usage"].HasMember("speculative")) << got.body;
  EXPECT_GT(d["usage"]["speculative"]["drafted_tokens"].GetUint64(), 0u);
}

TEST_F(SpecE2E, GreedyFixturePromptsMatchWithoutSpeculation) {
  for (const char* name : {"chat_basic", "rand_200", "rand_1500"}) {
    const std::vector<int32_t> ids = load_reference_prompt(name).ids;
    const std::string body = greedy_completion_body(ids, ids.size(), 40);
    const HttpReply want = post_completion(plain_->port(), body);
    const HttpReply got = post_completion(spec_->port(), body);
    ASSERT_EQ(want.status, 200) << want.body;
    EXPECT_EQ(completion_outcome(got), completion_outcome(want)) << name;
    // The usage extension: only the speculating server reports it.
    rapidjson::Document d;
    d.Parse(got.body.c_str());
    ASSERT_TRUE(d["usage"].HasMember("speculative")) << got.body;
    const auto& sp = d["usage"]["speculative"];
    EXPECT_GT(sp["drafted_tokens"].GetUint64(), 0u) << name;
    EXPECT_LE(sp["accepted_tokens"].GetUint64(), sp["drafted_tokens"].GetUint64());
    EXPECT_GE(sp["mean_accepted_length"].GetDouble(), 1.0);
    d.Parse(want.body.c_str());
    EXPECT_FALSE(d["usage"].HasMember("speculative")) << want.body;
  }
}

TEST_F(SpecE2E, SixteenConcurrentGreedyRequestsMatchWithoutSpeculation) {
  const std::vector<int32_t> ids = load_reference_prompt("rand_1500").ids;
  std::vector<std::string> bodies;
  for (int i = 0; i < 16; ++i) {
    const size_t len = 5 + static_cast<size_t>(i * 37 % 596);            // 5..600, mixed order
    const uint32_t max_tokens = 8 + static_cast<uint32_t>(i * 13 % 41);  // 8..48
    bodies.push_back(greedy_completion_body(ids, len, max_tokens));
  }
  const auto before = metric_samples(spec_->port());
  std::vector<HttpReply> want(bodies.size()), got(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] { want[i] = post_completion(plain_->port(), bodies[i]); });
    threads.emplace_back([&, i] { got[i] = post_completion(spec_->port(), bodies[i]); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < bodies.size(); ++i) {
    ASSERT_EQ(want[i].status, 200) << want[i].body;
    EXPECT_EQ(completion_outcome(got[i]), completion_outcome(want[i])) << "request " << i;
  }
  const auto after = metric_samples(spec_->port());
  const double drafted =
      after.at("deltaserve:spec_drafted_tokens_total") - before.at("deltaserve:spec_drafted_tokens_total");
  const double accepted =
      after.at("deltaserve:spec_accepted_tokens_total") - before.at("deltaserve:spec_accepted_tokens_total");
  EXPECT_GT(drafted, 0);
  EXPECT_LE(accepted, drafted);
  EXPECT_GE(after.at("deltaserve:spec_mean_accepted_length"), 1.0);
  EXPECT_EQ(metric_samples(plain_->port()).at("deltaserve:spec_drafted_tokens_total"), 0);
  std::fprintf(stderr, "[spec e2e] 16 requests: %.0f drafted, %.0f accepted\n", drafted, accepted);
}

// logprobs.tokens of a non-streamed completion.
std::vector<std::string> reply_tokens(const HttpReply& r) {
  rapidjson::Document d;
  d.Parse(r.body.c_str());
  std::vector<std::string> out;
  if (d.HasParseError() || !d.HasMember("choices")) return out;
  for (const auto& t : d["choices"][0]["logprobs"]["tokens"].GetArray()) out.emplace_back(t.GetString());
  return out;
}

// logit_bias and min_tokens are edits of the logit rows on the last worker, each verify row with
// the edits of its own position: greedy output with and without speculation stays identical, a
// banned id never comes, a +100 bias takes over, and min_tokens holds a stop id back.
TEST_F(SpecE2E, LogitBiasAndMinTokensKeepSpeculationIdentical) {
  const ReferencePrompt ref = load_reference_prompt("chat_basic");
  ASSERT_GE(ref.greedy_tokens.size(), 6u);
  const auto body = [&](const std::string& extra) {
    return R"({"prompt": )" + ids_json(ref.ids) + R"(, "max_tokens": 24, "temperature": 0, "logprobs": 1, )" + extra +
           "}";
  };
  const HttpReply free_run = post_completion(plain_->port(), body(R"("ignore_eos": true)"));
  ASSERT_EQ(free_run.status, 200) << free_run.body;
  const std::vector<std::string> free_tokens = reply_tokens(free_run);
  ASSERT_GE(free_tokens.size(), 6u);
  const std::string first = std::to_string(ref.greedy_tokens[0]), forced = std::to_string(ref.greedy_tokens[5]);

  const std::string banned = body(R"("ignore_eos": true, "logit_bias": {")" + first + R"(": -100})");
  const std::string takeover = body(R"("ignore_eos": true, "logit_bias": {")" + forced + R"(": 100})");
  const std::string held =
      body(R"("min_tokens": 4, "stop_token_ids": [)" + forced + R"(], "logit_bias": {")" + forced + R"(": 100})");
  for (const std::string& b : {banned, takeover, held}) {
    const HttpReply want = post_completion(plain_->port(), b), got = post_completion(spec_->port(), b);
    ASSERT_EQ(want.status, 200) << want.body;
    EXPECT_EQ(completion_outcome(got), completion_outcome(want)) << b;
  }
  const std::vector<std::string> without_first = reply_tokens(post_completion(spec_->port(), banned));
  ASSERT_FALSE(without_first.empty());
  EXPECT_NE(without_first[0], free_tokens[0]);
  for (const std::string& t : reply_tokens(post_completion(spec_->port(), takeover))) EXPECT_EQ(t, free_tokens[5]);
  const HttpReply h = post_completion(spec_->port(), held);
  const std::vector<std::string> held_tokens = reply_tokens(h);
  // Four tokens, then the stop id, which is returned (as vLLM does for a stop id not special).
  ASSERT_EQ(held_tokens.size(), 5u) << h.body;
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(held_tokens[i], free_tokens[5]) << i;
  EXPECT_EQ(held_tokens[4], free_tokens[5]);
  EXPECT_NE(h.body.find(R"("finish_reason":"stop")"), std::string::npos) << h.body;
}

// The penalties count the sequence's earlier tokens on the last worker, by position: with and
// without speculation (verify rows see the drafts before them) and after a prefix-cache hit
// (the coordinator sends the tokens the worker did not see), greedy output is the same.
TEST_F(SpecE2E, PenaltiesKeepSpeculationAndPrefixHitsIdentical) {
  const std::vector<int32_t> ids = load_reference_prompt("rand_1500").ids;
  const auto body = [&](const std::string& penalties) {
    return R"({"prompt": )" + prefix_json(ids, 777) + R"(, "max_tokens": 32, "temperature": 0, "ignore_eos": true, )" +
           R"("logprobs": 1, )" + penalties + "}";
  };
  const std::string free_body = body(R"("presence_penalty": 0)");
  // Flat random-weight logits never repeat a token on their own; a negative presence penalty
  // and frequency penalty (a reward) makes the first generated tokens win every later row.
  const std::string presence = body(R"("presence_penalty": -2, "frequency_penalty": -2)");
  const std::string mixed = body(R"("frequency_penalty": 0.7, "presence_penalty": 0.3, "repetition_penalty": 1.3)");
  const HttpReply free_run = post_completion(plain_->port(), free_body);
  ASSERT_EQ(free_run.status, 200) << free_run.body;
  for (const std::string& b : {presence, mixed}) {
    const HttpReply first = post_completion(plain_->port(), b);  // the prompt's blocks are cached by now
    const HttpReply again = post_completion(plain_->port(), b);
    const HttpReply spec = post_completion(spec_->port(), b);
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_NE(again.body.find(R"("cached_tokens":7)"), std::string::npos) << again.body;  // 7xx tokens hit
    EXPECT_EQ(completion_outcome(again), completion_outcome(first)) << b;
    EXPECT_EQ(completion_outcome(spec), completion_outcome(first)) << b;
    EXPECT_NE(completion_outcome(first), completion_outcome(free_run)) << b;
  }
  const std::vector<std::string> free_tokens = reply_tokens(free_run);
  EXPECT_GT(std::set<std::string>(free_tokens.begin(), free_tokens.end()).size(), 16u);
  const std::vector<std::string> tokens = reply_tokens(post_completion(spec_->port(), presence));
  ASSERT_EQ(tokens.size(), 32u);
  EXPECT_LE(std::set<std::string>(tokens.begin(), tokens.end()).size(), 2u);
}

// Temperature > 0 keeps the draft distributions on the last stage from one step to the next
// (rejection sampling needs them): sampled requests, concurrent and with top_k / top_p, must
// complete with every token. (A fixed seed does not repeat a text token for token here: the
// drafts, hence the random numbers' use, depend on the MTP inputs, which differ after a
// prefix-cache hit. The distribution is the target's: TemperatureOneEmitsTheTargetDistribution.)
TEST_F(SpecE2E, SampledRequestsComplete) {
  const std::vector<int32_t> ids = load_reference_prompt("rand_200").ids;
  auto body = [&](int i) {
    return R"({"prompt": )" + prefix_json(ids, 20 + static_cast<size_t>(i) * 11) +
           R"(, "max_tokens": 16, "ignore_eos": true, "temperature": )" + (i % 2 ? "1" : "0.7") +
           (i % 3 == 0 ? R"(, "top_p": 0.9)" : R"(, "top_k": 40)") + R"(, "seed": )" + std::to_string(100 + i) + "}";
  };
  // top_p needs a full sort of the vocabulary per row and draft on the host, the slowest case
  // on the CPU: 2 of the 6 requests use it.
  std::vector<HttpReply> replies(6);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < replies.size(); ++i) {
    threads.emplace_back([&, i] { replies[i] = post_completion(spec_->port(), body(static_cast<int>(i))); });
  }
  for (auto& t : threads) t.join();
  for (const HttpReply& r : replies) {
    ASSERT_EQ(r.status, 200) << r.body;
    rapidjson::Document d;
    d.Parse(r.body.c_str());
    EXPECT_EQ(d["usage"]["completion_tokens"].GetUint(), 16u);
    EXPECT_GT(d["usage"]["speculative"]["drafted_tokens"].GetUint64(), 0u);
  }
}

// Worker-crash replay with speculation: the restarted pipeline re-prefills each sequence from
// its accepted tokens (pending drafts and rollback marks are dropped), so the greedy text is
// still the text without speculation. Runs last: it restarts a worker of the spec server.
TEST_F(SpecE2E, WorkerKilledMidStreamGivesTheSameTokens) {
  const std::vector<int32_t> ids = load_reference_prompt("rand_200").ids;
  const std::string body =
      R"({"prompt": )" + ids_json(ids) + R"(, "max_tokens": 64, "temperature": 0, "stream": true})";
  const HttpReply clean = post_completion(plain_->port(), body);
  ASSERT_EQ(clean.status, 200);
  bool killed = false;
  const HttpReply crashed =
      http_request(spec_->port(), "POST", "/v1/completions", body, {}, [&](const std::string& so_far) {
        if (!killed && sse_events(so_far).size() >= 8) {
          kill(spec_->worker_pids().at(1), SIGKILL);
          killed = true;
        }
      });
  ASSERT_TRUE(killed) << "the stream ended before the worker could be killed";
  ASSERT_EQ(crashed.status, 200);
  EXPECT_EQ(streamed_completion_text(crashed.body), streamed_completion_text(clean.body));
}

// --spec-k with a model that has no MTP block (the VL fixture, with and without its mmproj; the
// small text model) stops start-up with a message naming the flag, instead of a 500 per request.
TEST(SpecE2EStart, ModelWithoutAnMtpBlockIsRefusedAtStart) {
  const std::vector<std::vector<std::string>> models = {
      {"--model", vision_model_path(), "--mmproj", vision_mmproj_path()},
      {"--model", vision_model_path()},
      {"--model", data_path("small-qwen35-q8_0.gguf")},
  };
  for (std::vector<std::string> args : models) {
    args.insert(args.end(), {"--workers", "2", "--port", "0", "--spec-k", "2"});
    try {
      ServerProcess server(args);
      ADD_FAILURE() << args[1] << ": started with --spec-k 2";
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("fatal: --spec-k 2: "), std::string::npos) << m;
      EXPECT_NE(m.find("has no MTP block (qwen35.nextn_predict_layers is 0)"), std::string::npos) << m;
      EXPECT_EQ(m.find("listening on"), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace ds::test
