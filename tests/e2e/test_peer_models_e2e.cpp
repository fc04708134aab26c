// One chat server answering for an embedding and a reranker model too (issue 29): hosted in the
// same process tree (--embed-model / --rerank-model, each with its own CPU workers) or reached
// over HTTP (--embed-upstream / --rerank-upstream), with the upstream killed and restarted.
//
// Tolerances: as test_pooling_e2e (CPU workers: f32, a fixed reduction order). Through a hosted
// peer or a proxy, the vectors are the same computation as on the pooling server itself, so
// they are compared exactly.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/server_process.h"

namespace ds::test {
namespace {

std::string data_path(const std::string& name) {
  return std::string(DS_TESTDATA_DIR) + "/" + name;
}

const rapidjson::Value& fixtures() {
  static rapidjson::Document doc = [] {
    std::ifstream f(data_path("reference/qwen3_embed_rerank.json"));
    std::stringstream ss;
    ss << f.rdbuf();
    rapidjson::Document d;
    d.Parse(ss.str().c_str());
    return d;
  }();
  return doc["fixtures"];
}

std::string escape(const std::string& s) {
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return b.GetString();
}

std::vector<float> first_embedding(const HttpReply& r) {
  rapidjson::Document d;
  d.Parse(r.body.c_str());
  std::vector<float> v;
  if (!d.IsObject() || !d.HasMember("data")) return v;
  for (const auto& x : d["data"][0]["embedding"].GetArray()) v.push_back(x.GetFloat());
  return v;
}

double first_score(const HttpReply& r) {
  rapidjson::Document d;
  d.Parse(r.body.c_str());
  return d.IsObject() && d.HasMember("results") ? d["results"][0]["relevance_score"].GetDouble() : -1.0;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += double{a[i]} * b[i];
    aa += double{a[i]} * a[i];
    bb += double{b[i]} * b[i];
  }
  return a.size() == b.size() && aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : -2.0;
}

std::vector<float> floats(const rapidjson::Value& a) {
  std::vector<float> v;
  for (const auto& x : a.GetArray()) v.push_back(x.GetFloat());
  return v;
}

const std::vector<std::string> kChat = {
    "--model", data_path("tiny-qwen35-q8_0.gguf"), "--workers", "1", "--port", "0", "--threads", "1", "--max-seqs",
    "4"};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::string embed_body() {
  return R"({"input":)" + escape(fixtures()["qwen3_embed"]["cases"][0]["text"].GetString()) + "}";
}

std::string rerank_body() {
  const rapidjson::Value& c = fixtures()["qwen3_rerank"]["cases"][0];
  return R"({"query":)" + escape(c["query"].GetString()) + R"(,"documents":[)" + escape(c["document"].GetString()) +
         "]}";
}

TEST(PeerModelsE2E, AChatServerHostsAnEmbeddingAndARerankerModel) {
  ServerProcess server(
      with(kChat, {"--embed-model", data_path("tiny-qwen3-embed-q8_0.gguf"), "--embed-workers", "2", "--rerank-model",
                   data_path("tiny-qwen3-rerank-q8_0.gguf"), "--rerank-model-name", "my-reranker"}));
  const HttpReply models = http_request(server.port(), "GET", "/v1/models", "");
  ASSERT_EQ(models.status, 200) << models.body;
  rapidjson::Document m;
  m.Parse(models.body.c_str());
  std::set<std::string> listed;
  for (const auto& e : m["data"].GetArray())
    listed.insert(std::string(e["id"].GetString()) + ":" + e["task"].GetString());
  EXPECT_EQ(listed, (std::set<std::string>{"tiny-qwen35-q8_0.gguf:generate", "tiny-qwen3-embed-q8_0.gguf:embed",
                                           "my-reranker:rerank"}));

  const HttpReply e = http_request(server.port(), "POST", "/v1/embeddings", embed_body());
  ASSERT_EQ(e.status, 200) << e.body;
  EXPECT_GE(cosine(first_embedding(e), floats(fixtures()["qwen3_embed"]["cases"][0]["embedding"])), 0.99999);
  const HttpReply r = http_request(server.port(), "POST", "/v1/rerank", rerank_body());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NEAR(first_score(r), fixtures()["qwen3_rerank"]["cases"][0]["score"].GetDouble(), 1e-4);
  const HttpReply named =
      http_request(server.port(), "POST", "/v1/rerank", R"({"model":"my-reranker",)" + rerank_body().substr(1));
  EXPECT_EQ(named.status, 200) << named.body;
  const HttpReply wrong = http_request(server.port(), "POST", "/v1/rerank",
                                       R"({"model":"tiny-qwen35-q8_0.gguf",)" + rerank_body().substr(1));
  EXPECT_EQ(wrong.status, 404) << "the chat model is not the reranker: " << wrong.body;

  const HttpReply chat = post_completion(server.port(), R"({"prompt":"hello","max_tokens":4})");
  EXPECT_EQ(chat.status, 200) << chat.body;
  const HttpReply ready = http_request(server.port(), "GET", "/ready", "");
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_NE(ready.body.find(R"("workers_total":4)"), std::string::npos)
      << "1 chat + 2 embed + 1 rerank: " << ready.body;
  EXPECT_EQ(server.terminate(30000), 0) << server.log();
}

TEST(PeerModelsE2E, BadPeerOptionsAreClearErrors) {
  // An embedding model given as the reranker: the server refuses to start.
  EXPECT_THROW(ServerProcess(with(kChat, {"--rerank-model", data_path("tiny-qwen3-embed-q8_0.gguf")})),
               std::runtime_error);
  EXPECT_THROW(ServerProcess(with(kChat, {"--embed-upstream", "https://example.com"})), std::runtime_error);
  EXPECT_THROW(ServerProcess(with(kChat, {"--embed-model", data_path("tiny-qwen3-embed-q8_0.gguf"), "--embed-upstream",
                                          "http://127.0.0.1:9"})),
               std::runtime_error);
}

TEST(PeerModelsE2E, TheChatServerProxiesAnUpstreamThatDiesAndComesBack) {
  const std::vector<std::string> embed_args = {
      "--model", data_path("tiny-qwen3-embed-q8_0.gguf"), "--workers", "1", "--threads", "1", "--max-seqs", "4"};
  auto upstream = std::make_unique<ServerProcess>(with(embed_args, {"--port", "0"}));
  const int upstream_port = upstream->port();
  const HttpReply direct = http_request(upstream_port, "POST", "/v1/embeddings", embed_body());
  ASSERT_EQ(direct.status, 200) << direct.body;

  ServerProcess chat(with(
      kChat, {"--embed-upstream", "http://127.0.0.1:" + std::to_string(upstream_port), "--upstream-timeout", "20"}));
  const HttpReply proxied = http_request(chat.port(), "POST", "/v1/embeddings", embed_body());
  ASSERT_EQ(proxied.status, 200) << proxied.body;
  EXPECT_EQ(first_embedding(proxied), first_embedding(direct));
  const HttpReply no_reranker = http_request(chat.port(), "POST", "/v1/rerank", rerank_body());
  EXPECT_EQ(no_reranker.status, 400) << "no reranker configured: " << no_reranker.body;

  upstream.reset();  // SIGKILL: the upstream is gone
  const HttpReply down = http_request(chat.port(), "POST", "/v1/embeddings", embed_body());
  EXPECT_EQ(down.status, 502) << down.body;
  EXPECT_NE(down.body.find("embedding upstream"), std::string::npos) << down.body;
  EXPECT_NE(down.body.find(std::to_string(upstream_port)), std::string::npos) << down.body;
  const HttpReply health = http_request(chat.port(), "GET", "/health", "");
  EXPECT_EQ(health.status, 200) << "the chat server itself stays up";

  upstream = std::make_unique<ServerProcess>(with(embed_args, {"--port", std::to_string(upstream_port)}));
  const HttpReply back = http_request(chat.port(), "POST", "/v1/embeddings", embed_body());
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(first_embedding(back), first_embedding(direct));
  EXPECT_EQ(chat.terminate(30000), 0) << chat.log();
}

}  // namespace
}  // namespace ds::test
