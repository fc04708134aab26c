// Embeddings and reranking end to end (`deltaserve serve` on the tiny Qwen3-Embedding and
// Qwen3-Reranker fixtures, CPU workers, real HTTP): every reference case (transformers float32 on
// the same weights) through /v1/embeddings and /v1/rerank, the Matryoshka slice, base64, token-id
// inputs, 64 mixed-length inputs in one request equal to one by one, top_n / index mapping,
// /v1/score, and the errors a client gets for what a pooling server cannot do.
//
// Tolerances: CPU workers compute in f32 with a fixed reduction order, so an embedding is within
// f32 rounding of the reference (cosine >= 0.99999, the issue's bound) and a score within 1e-4;
// batched and single computations are identical on CPU (batch-invariant kernels), checked to 1e-6.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/server_process.h"
#include "tests/testutil/testutil.h"

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

std::vector<float> floats(const rapidjson::Value& a) {
  std::vector<float> v;
  for (const auto& x : a.GetArray()) v.push_back(x.GetFloat());
  return v;
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

rapidjson::Document parse(const HttpReply& r) {
  rapidjson::Document d;
  d.Parse(r.body.c_str());
  return d;
}

// The embeddings of a reply, by index.
std::vector<std::vector<float>> embeddings_of(const HttpReply& r) {
  rapidjson::Document d = parse(r);
  std::vector<std::vector<float>> out(d["data"].Size());
  for (const auto& e : d["data"].GetArray()) out.at(e["index"].GetUint()) = floats(e["embedding"]);
  return out;
}

std::vector<float> from_base64(const std::string& s) {
  static const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(kAlphabet.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

class PoolingE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The embedding server is a two-stage pipeline (pooled rows leave the last stage), the
    // reranker one worker.
    embed_ = new ServerProcess({"--model", data_path("tiny-qwen3-embed-q8_0.gguf"), "--workers", "2", "--port", "0",
                                "--threads", "1", "--max-seqs", "16", "--max-batch-tokens", "256"});
    rerank_ = new ServerProcess({"--model", data_path("tiny-qwen3-rerank-q8_0.gguf"), "--workers", "1", "--port", "0",
                                 "--threads", "2", "--max-seqs", "16"});
  }
  static void TearDownTestSuite() { stop_servers({&embed_, &rerank_}); }
  static ServerProcess* embed_;
  static ServerProcess* rerank_;
};
ServerProcess* PoolingE2E::embed_ = nullptr;
ServerProcess* PoolingE2E::rerank_ = nullptr;

TEST_F(PoolingE2E, EmbeddingsMatchTheReference) {
  const rapidjson::Value& cases = fixtures()["qwen3_embed"]["cases"];
  std::string inputs;
  size_t tokens = 0;
  for (const auto& c : cases.GetArray()) {
    inputs += (inputs.empty() ? "" : ",") + escape(c["text"].GetString());
    tokens += c["ids"].Size();
  }
  for (const bool dim32 : {false, true}) {
    const std::string body = R"({"model":"tiny-qwen3-embed-q8_0.gguf","input":[)" + inputs + "]" +
                             (dim32 ? R"(,"dimensions":32)" : "") + "}";
    const HttpReply r = http_request(embed_->port(), "POST", "/v1/embeddings", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const std::vector<std::vector<float>> got = embeddings_of(r);
    ASSERT_EQ(got.size(), cases.Size());
    for (rapidjson::SizeType i = 0; i < cases.Size(); ++i) {
      const std::vector<float> want = floats(cases[i][dim32 ? "embedding_dim32" : "embedding"]);
      EXPECT_GE(cosine(got[i], want), 0.99999) << "case " << i << " (" << cases[i]["text"].GetString() << ")";
    }
    rapidjson::Document d = parse(r);
    EXPECT_EQ(d["usage"]["prompt_tokens"].GetUint64(), tokens) << "each input with exactly one <|endoftext|>";
    EXPECT_STREQ(d["object"].GetString(), "list");
  }
}

TEST_F(PoolingE2E, Base64AndTokenIdInputsGiveTheSameVectors) {
  const rapidjson::Value& c = fixtures()["qwen3_embed"]["cases"][0];
  std::vector<int32_t> ids;
  for (const auto& x : c["ids"].GetArray()) ids.push_back(x.GetInt());
  const HttpReply text =
      http_request(embed_->port(), "POST", "/v1/embeddings", R"({"input":)" + escape(c["text"].GetString()) + "}");
  const HttpReply by_ids =
      http_request(embed_->port(), "POST", "/v1/embeddings", R"({"input":[)" + ids_json(ids) + "]}");
  const HttpReply b64 =
      http_request(embed_->port(), "POST", "/v1/embeddings",
                   R"({"input":)" + escape(c["text"].GetString()) + R"(,"encoding_format":"base64"})");
  ASSERT_EQ(text.status, 200) << text.body;
  ASSERT_EQ(by_ids.status, 200) << by_ids.body;
  ASSERT_EQ(b64.status, 200) << b64.body;
  const std::vector<float> t = embeddings_of(text)[0];
  EXPECT_EQ(embeddings_of(by_ids)[0], t) << "ids ending in <|endoftext|> get no second one";
  rapidjson::Document d = parse(b64);
  EXPECT_EQ(from_base64(d["data"][0]["embedding"].GetString()), t);
}

TEST_F(PoolingE2E, ABatchOfMixedLengthsEqualsOneByOne) {
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) {
    std::string s = "input " + std::to_string(i) + ":";
    for (int w = 0; w < (i * 7) % 41; ++w) s += " word" + std::to_string((i + w) % 13);
    texts.push_back(s);
  }
  std::string all;
  for (const std::string& t : texts) all += (all.empty() ? "" : ",") + escape(t);
  const HttpReply batch = http_request(embed_->port(), "POST", "/v1/embeddings", R"({"input":[)" + all + "]}");
  ASSERT_EQ(batch.status, 200) << batch.body;
  const std::vector<std::vector<float>> together = embeddings_of(batch);
  ASSERT_EQ(together.size(), texts.size());
  for (size_t i = 0; i < texts.size(); i += 9) {
    const HttpReply one =
        http_request(embed_->port(), "POST", "/v1/embeddings", R"({"input":)" + escape(texts[i]) + "}");
    ASSERT_EQ(one.status, 200) << one.body;
    const std::vector<float> alone = embeddings_of(one)[0];
    ASSERT_EQ(alone.size(), together[i].size());
    for (size_t k = 0; k < alone.size(); ++k) EXPECT_NEAR(alone[k], together[i][k], 1e-6) << "input " << i;
  }
}

TEST_F(PoolingE2E, EmbeddingErrorsNameTheProblem) {
  const auto post = [&](const std::string& body) {
    return http_request(embed_->port(), "POST", "/v1/embeddings", body);
  };
  EXPECT_EQ(post(R"({"input":""})").status, 400);
  EXPECT_EQ(post(R"({"input":[]})").status, 400);
  const HttpReply wide = post(R"({"input":"x","dimensions":65})");
  EXPECT_EQ(wide.status, 400);
  EXPECT_NE(wide.body.find("64"), std::string::npos) << wide.body;
  EXPECT_EQ(post(R"({"input":"x","encoding_format":"int8"})").status, 400);
  const HttpReply chat =
      http_request(embed_->port(), "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(chat.status, 400);
  EXPECT_NE(chat.body.find("embedding"), std::string::npos) << chat.body;
  const HttpReply rerank = http_request(embed_->port(), "POST", "/v1/rerank", R"({"query":"q","documents":["d"]})");
  EXPECT_EQ(rerank.status, 400) << rerank.body;
}

TEST_F(PoolingE2E, RerankScoresMatchTheReference) {
  const rapidjson::Value& cases = fixtures()["qwen3_rerank"]["cases"];
  for (const auto& c : cases.GetArray()) {
    std::string body =
        R"({"query":)" + escape(c["query"].GetString()) + R"(,"documents":[)" + escape(c["document"].GetString()) + "]";
    if (c["instruction"].IsString()) body += R"(,"instruction":)" + escape(c["instruction"].GetString());
    const HttpReply r = http_request(rerank_->port(), "POST", "/v1/rerank", body + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    rapidjson::Document d = parse(r);
    EXPECT_NEAR(d["results"][0]["relevance_score"].GetDouble(), c["score"].GetDouble(), 1e-4)
        << c["query"].GetString() << " / " << c["document"].GetString();
  }
}

TEST_F(PoolingE2E, RerankSortsCutsAndMapsIndices) {
  // The two documents of the first query, in one request, plus the injection attempt.
  const rapidjson::Value& cases = fixtures()["qwen3_rerank"]["cases"];
  const std::string docs = escape(cases[0]["document"].GetString()) + "," + escape(cases[1]["document"].GetString()) +
                           "," + escape(cases[3]["document"].GetString());
  const std::string query = escape(cases[0]["query"].GetString());
  const HttpReply all =
      http_request(rerank_->port(), "POST", "/rerank",
                   R"({"query":)" + query + R"(,"documents":[)" + docs + R"(],"return_documents":true})");
  ASSERT_EQ(all.status, 200) << all.body;
  rapidjson::Document d = parse(all);
  ASSERT_EQ(d["results"].Size(), 3u);
  double previous = 2.0;
  for (const auto& r : d["results"].GetArray()) {
    EXPECT_LE(r["relevance_score"].GetDouble(), previous) << "sorted by score";
    previous = r["relevance_score"].GetDouble();
    const size_t index = r["index"].GetUint();
    ASSERT_LT(index, 2u + 1);
    const rapidjson::Value& doc = cases[static_cast<rapidjson::SizeType>(index == 2 ? 3 : index)]["document"];
    EXPECT_STREQ(r["document"]["text"].GetString(), doc.GetString());
    if (index < 2) {
      EXPECT_NEAR(r["relevance_score"].GetDouble(), cases[static_cast<rapidjson::SizeType>(index)]["score"].GetDouble(),
                  1e-4);
    }
  }
  const HttpReply top1 = http_request(rerank_->port(), "POST", "/v1/rerank",
                                      R"({"query":)" + query + R"(,"documents":[)" + docs + R"(],"top_n":1})");
  ASSERT_EQ(top1.status, 200) << top1.body;
  rapidjson::Document t = parse(top1);
  ASSERT_EQ(t["results"].Size(), 1u);
  EXPECT_EQ(t["results"][0]["index"].GetUint(), d["results"][0]["index"].GetUint());
  const HttpReply score =
      http_request(rerank_->port(), "POST", "/v1/score", R"({"text_1":)" + query + R"(,"text_2":[)" + docs + "]}");
  ASSERT_EQ(score.status, 200) << score.body;
  rapidjson::Document s = parse(score);
  ASSERT_EQ(s["data"].Size(), 3u);
  EXPECT_NEAR(s["data"][1]["score"].GetDouble(), cases[1]["score"].GetDouble(), 1e-4) << "request order";
  // The documents share the prompt's template and query: the first runs alone and the others
  // reuse its KV blocks (the scores above are the reference's all the same).
  const HttpReply m = http_request(rerank_->port(), "GET", "/metrics", "");
  const std::string key = "\ndeltaserve:prefix_cache_hit_tokens_total ";
  const size_t at = m.body.find(key);
  ASSERT_NE(at, std::string::npos) << m.body;
  EXPECT_GE(std::stod(m.body.substr(at + key.size())), 2.0 * 3 * 16) << "two blocks for each follower, three requests";
}

TEST_F(PoolingE2E, RerankErrors) {
  const auto post = [&](const std::string& body) { return http_request(rerank_->port(), "POST", "/v1/rerank", body); };
  EXPECT_EQ(post(R"({"documents":["d"]})").status, 400);
  EXPECT_EQ(post(R"({"query":"q","documents":["d"],"top_n":-1})").status, 400);
  EXPECT_EQ(http_request(rerank_->port(), "POST", "/v1/embeddings", R"({"input":"x"})").status, 400);
}

}  // namespace
}  // namespace ds::test
