#include "tests/testutil/qwen3_reference.h"

#include <rapidjson/document.h>

#include <memory>
#include <stdexcept>

#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

const rapidjson::Value& fixtures() {
  static std::unique_ptr<rapidjson::Document> doc;
  if (!doc) {
    std::vector<uint8_t> bytes = read_file(data_path("reference/qwen3_embed_rerank.json"));
    doc = std::make_unique<rapidjson::Document>();
    doc->Parse(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (doc->HasParseError()) throw std::runtime_error("qwen3 reference manifest does not parse");
  }
  return (*doc)["fixtures"];
}

template <typename T>
std::vector<T> array_of(const rapidjson::Value& v) {
  std::vector<T> out;
  for (const auto& x : v.GetArray()) out.push_back(static_cast<T>(x.GetDouble()));
  return out;
}

}  // namespace

std::string qwen3_embed_model_path() {
  return data_path("tiny-qwen3-embed-q8_0.gguf");
}

std::string qwen3_rerank_model_path() {
  return data_path("tiny-qwen3-rerank-q8_0.gguf");
}

std::vector<Qwen3EmbedCase> load_qwen3_embed_cases() {
  std::vector<Qwen3EmbedCase> out;
  for (const auto& c : fixtures()["qwen3_embed"]["cases"].GetArray()) {
    Qwen3EmbedCase e;
    e.text = c["text"].GetString();
    e.ids = array_of<int32_t>(c["ids"]);
    e.embedding = array_of<float>(c["embedding"]);
    e.embedding_dim32 = array_of<float>(c["embedding_dim32"]);
    out.push_back(std::move(e));
  }
  return out;
}

Qwen3RerankFixture load_qwen3_rerank_fixture() {
  const rapidjson::Value& r = fixtures()["qwen3_rerank"];
  Qwen3RerankFixture f;
  f.yes_id = r["yes_id"].GetInt();
  f.no_id = r["no_id"].GetInt();
  for (const auto& c : r["cases"].GetArray()) {
    Qwen3RerankCase k;
    k.query = c["query"].GetString();
    k.document = c["document"].GetString();
    k.ids = array_of<int32_t>(c["ids"]);
    k.yes_logit = c["yes_logit"].GetDouble();
    k.no_logit = c["no_logit"].GetDouble();
    k.score = c["score"].GetDouble();
    f.cases.push_back(std::move(k));
  }
  return f;
}

}  // namespace ds::test
