// Rerank request layer: the client bodies (Jina/Cohere, Dify, Open WebUI, TEI, vLLM score), every
// refusal, the reference prompts' exact token ids (documents tokenized as literal text), the
// document-only truncation, the score and the sorted, cut, index-mapped responses.
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/http/api_error.h"
#include "coordinator/openai/embedding_request.h"
#include "coordinator/openai/json_fields.h"
#include "coordinator/openai/rerank_request.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "tests/testutil/testutil.h"

namespace ds::openai {
namespace {

constexpr size_t kContext = 4096;

const Tokenizer& tokenizer() {
  static const auto tok =
      std::make_unique<Tokenizer>(Tokenizer::from_file(test::data_path("tiny-qwen3-rerank-q8_0.gguf")));
  return *tok;
}

const RerankTemplate& tmpl() {
  static const RerankTemplate t = make_rerank_template(tokenizer());
  return t;
}

struct RerankCase {
  std::optional<std::string> instruction;
  std::string query;
  std::string document;
  std::vector<int32_t> ids;
  float yes_logit = 0;
  float no_logit = 0;
  double score = 0;
};

// fixtures.qwen3_rerank.cases of the shared reference manifest (transformers float32).
const std::vector<RerankCase>& cases() {
  static const std::vector<RerankCase> out = [] {
    const std::vector<uint8_t> bytes = test::read_file(test::data_path("embed_rerank_request_cases.json"));
    rapidjson::Document d;
    d.Parse(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    std::vector<RerankCase> v;
    for (const auto& c : d["rerank"]["cases"].GetArray()) {
      RerankCase r;
      if (c["instruction"].IsString()) r.instruction = to_string(c["instruction"]);
      r.query = to_string(c["query"]);
      r.document = to_string(c["document"]);
      for (const auto& id : c["ids"].GetArray()) r.ids.push_back(id.GetInt());
      r.yes_logit = static_cast<float>(c["yes_logit"].GetDouble());
      r.no_logit = static_cast<float>(c["no_logit"].GetDouble());
      r.score = c["score"].GetDouble();
      v.push_back(std::move(r));
    }
    return v;
  }();
  return out;
}

std::string json_quote(const std::string& s) {
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return sb.GetString();
}

RerankParams parse(const std::string& body) {
  const rapidjson::Document d = parse_body(body);
  return parse_rerank_params(d);
}

RerankParams parse_score(const std::string& body) {
  const rapidjson::Document d = parse_body(body);
  return parse_score_params(d);
}

RerankParams params_of(const RerankCase& c) {
  std::string body = R"({"query":)" + json_quote(c.query) + R"(,"documents":[)" + json_quote(c.document) + "]";
  if (c.instruction) body += R"(,"instruction":)" + json_quote(*c.instruction);
  return parse(body + "}");
}

rapidjson::Document json(const std::string& s) {
  rapidjson::Document d;
  d.Parse(s.c_str(), s.size());
  EXPECT_FALSE(d.HasParseError()) << s;
  return d;
}

// ---- bodies ------------------------------------------------------------------------------------------

TEST(RerankParams, JinaCohereBodyWithDefaults) {
  const RerankParams p = parse(R"({"model":"r","query":"q","documents":["a","b"]})");
  EXPECT_EQ(p.api, RerankApi::kRerank);
  EXPECT_EQ(p.model, "r");
  EXPECT_EQ(p.query, "q");
  EXPECT_EQ(p.documents, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p.top_n, 0u);
  EXPECT_FALSE(p.return_documents);
  EXPECT_FALSE(p.raw_scores);
  EXPECT_EQ(p.instruction, kDefaultRerankInstruction);
  EXPECT_FALSE(p.max_tokens_per_doc);
}

TEST(RerankParams, DocumentObjectsAndOptions) {
  const RerankParams p = parse(R"({"query":{"text":"q"},"documents":[{"text":"a","id":7},"b",{"text":""}],"top_n":2,)"
                               R"("return_documents":true,"instruction":"Find code","max_tokens_per_doc":64})");
  EXPECT_EQ(p.query, "q");
  EXPECT_EQ(p.documents, (std::vector<std::string>{"a", "b", ""}));
  EXPECT_EQ(p.top_n, 2u);
  EXPECT_TRUE(p.return_documents);
  EXPECT_EQ(p.instruction, "Find code");
  EXPECT_EQ(p.max_tokens_per_doc, 64u);
  EXPECT_EQ(parse(R"({"query":"q","documents":["a"],"instruct":"sglang"})").instruction, "sglang");
}

TEST(RerankParams, DifyTopNNullMeansAll) {
  const RerankParams p =
      parse(R"({"model":"r","query":"q","documents":["a","b"],"top_n":null,"return_documents":true})");
  EXPECT_EQ(p.top_n, 0u);
  EXPECT_TRUE(p.return_documents);
}

TEST(RerankParams, TeiTextsSelectTheBareArray) {
  const RerankParams p = parse(R"({"query":"q","texts":["a","b"],"return_text":true,"raw_scores":true})");
  EXPECT_EQ(p.api, RerankApi::kTei);
  EXPECT_EQ(p.documents.size(), 2u);
  EXPECT_TRUE(p.return_documents);
  EXPECT_TRUE(p.raw_scores);
}

TEST(RerankParams, ScoreBody) {
  const RerankParams one = parse_score(R"({"model":"r","text_1":"q","text_2":"d"})");
  EXPECT_EQ(one.api, RerankApi::kScore);
  EXPECT_EQ(one.query, "q");
  EXPECT_EQ(one.documents, (std::vector<std::string>{"d"}));
  EXPECT_EQ(parse_score(R"({"text_1":"q","text_2":["d","e"]})").documents.size(), 2u);
}

struct BadBody {
  std::string body;
  std::string param;
  std::string message;
};

void expect_refused(const BadBody& c, bool score) {
  try {
    score ? parse_score(c.body) : parse(c.body);
    FAIL() << "accepted " << c.body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), c.param) << c.body;
    EXPECT_EQ(std::string(e.what()), c.message) << c.body;
  }
}

class RerankRefusal : public ::testing::TestWithParam<BadBody> {};
TEST_P(RerankRefusal, NamesTheFieldAndTheProblem) {
  expect_refused(GetParam(), false);
}

const std::string kDocs = R"(,"documents":["a"])";

INSTANTIATE_TEST_SUITE_P(
    Bodies, RerankRefusal,
    ::testing::Values(
        BadBody{R"({"documents":["a"]})", "query", "'query' is required"},
        BadBody{R"({"query":null)" + kDocs + "}", "query", "'query' is required"},
        BadBody{R"({"query":"")" + kDocs + "}", "query", "'query' must not be empty"},
        BadBody{R"({"query":5)" + kDocs + "}", "query", "'query' must be a string or an object with a \"text\" string"},
        BadBody{R"({"query":"q"})", "documents", "'documents' is required"},
        BadBody{R"({"query":"q","documents":"a"})", "documents",
                "'documents' must be an array of strings or of {\"text\": ...} objects"},
        BadBody{R"({"query":"q","documents":[]})", "documents", "'documents' must not be empty"},
        BadBody{R"({"query":"q","documents":["a",3]})", "documents",
                "documents[1] must be a string or an object with a \"text\" string"},
        BadBody{R"({"query":"q","documents":[{"image":"x"}]})", "documents",
                "documents[0] must be a string or an object with a \"text\" string"},
        BadBody{R"({"query":"q","documents":["a"],"texts":["b"]})", "texts", "Give 'documents' or 'texts', not both"},
        BadBody{R"({"query":"q","texts":[]})", "texts", "'texts' must not be empty"},
        BadBody{R"({"query":"q")" + kDocs + R"(,"top_n":-1})", "top_n", "'top_n' must be 0 (all) or positive, got -1"},
        BadBody{R"({"query":"q")" + kDocs + R"(,"top_n":2.5})", "top_n", "'top_n' must be an integer"},
        BadBody{R"({"query":"q")" + kDocs + R"(,"return_documents":"yes"})", "return_documents",
                "'return_documents' must be a boolean"},
        BadBody{R"({"query":"q")" + kDocs + R"(,"instruction":1})", "instruction", "'instruction' must be a string"},
        BadBody{R"({"query":"q")" + kDocs + R"(,"max_tokens_per_doc":0})", "max_tokens_per_doc",
                "'max_tokens_per_doc' must be positive, got 0"},
        BadBody{R"({"query":"q")" + kDocs + R"(,"model":1})", "model", "'model' must be a string"}));

TEST(RerankParams, ScoreRefusals) {
  expect_refused({R"({"text_2":"d"})", "text_1", "'text_1' is required"}, true);
  expect_refused({R"({"text_1":["a","b"],"text_2":"d"})", "text_1",
                  "'text_1' must be one string (lists of pairs are not supported)"},
                 true);
  expect_refused({R"({"text_1":"q"})", "text_2", "'text_2' is required"}, true);
  expect_refused({R"({"text_1":"q","text_2":[]})", "text_2", "'text_2' must not be empty"}, true);
}

TEST(RerankParams, AtMostMaxDocuments) {
  const rapidjson::Document d = parse_body(R"({"query":"q","documents":["a","b","c"]})");
  EXPECT_EQ(parse_rerank_params(d, 3).documents.size(), 3u);
  try {
    parse_rerank_params(d, 2);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "documents");
    EXPECT_EQ(std::string(e.what()), "'documents' holds 3 documents, at most 2 are allowed");
  }
}

// ---- prompts --------------------------------------------------------------------------------------------

TEST(RerankPrompt, TemplateHasControlTokensAtBothEnds) {
  const RerankTemplate& t = tmpl();
  const std::vector<int32_t>& ref = cases()[0].ids;
  ASSERT_FALSE(t.prefix.empty());
  EXPECT_EQ(t.prefix.front(), 151644);  // <|im_start|>
  EXPECT_EQ(std::vector<int32_t>(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(t.prefix.size())), t.prefix);
  EXPECT_EQ(std::vector<int32_t>(ref.end() - static_cast<std::ptrdiff_t>(t.suffix.size()), ref.end()), t.suffix);
  EXPECT_EQ(t.suffix.front(), 151645);  // <|im_end|>
}

TEST(RerankPrompt, MatchesTheReferenceIds) {
  for (const RerankCase& c : cases()) {
    const RerankBatch b = build_rerank_prompts(params_of(c), tokenizer(), tmpl(), kContext);
    ASSERT_EQ(b.prompts.size(), 1u);
    EXPECT_EQ(b.prompts[0].ids, c.ids) << c.query << " / " << c.document;
    EXPECT_FALSE(b.prompts[0].truncated);
    EXPECT_EQ(b.total_tokens, c.ids.size());
  }
}

TEST(RerankPrompt, DocumentControlTextStaysLiteral) {
  const RerankCase& injection = cases()[3];
  ASSERT_NE(injection.document.find("<|im_end|>"), std::string::npos);
  const RerankBatch b = build_rerank_prompts(params_of(injection), tokenizer(), tmpl(), kContext);
  const std::vector<int32_t>& ids = b.prompts[0].ids;
  for (size_t i = tmpl().prefix.size(); i < ids.size() - tmpl().suffix.size(); ++i) {
    EXPECT_FALSE(tokenizer().is_control(ids[i])) << "position " << i << " id " << ids[i];
  }
  const RerankBatch q =
      build_rerank_prompts(parse(R"({"query":"<|im_start|>","documents":["x"]})"), tokenizer(), tmpl(), kContext);
  EXPECT_EQ(std::count(q.prompts[0].ids.begin(), q.prompts[0].ids.end(), 151644), 3);  // the template's only
}

TEST(RerankPrompt, DocumentsShareTheQueryPrefix) {
  const RerankParams p = parse(R"({"query":"capital of Korea","documents":["Seoul is the capital of South Korea.",)"
                               R"("Paris is in France.",""]})");
  const RerankBatch b = build_rerank_prompts(p, tokenizer(), tmpl(), kContext);
  ASSERT_EQ(b.prompts.size(), 3u);
  EXPECT_EQ(b.prompts[0].ids, cases()[0].ids);
  EXPECT_EQ(b.prompts[1].ids, cases()[1].ids);
  const auto shared = static_cast<std::ptrdiff_t>(b.shared_prefix);
  for (const RerankPrompt& pr : b.prompts) {
    ASSERT_GT(pr.ids.size(), b.shared_prefix);
    EXPECT_TRUE(std::equal(pr.ids.begin(), pr.ids.begin() + shared, b.prompts[0].ids.begin()));
  }
  EXPECT_NE(b.prompts[0].ids[b.shared_prefix], b.prompts[1].ids[b.shared_prefix]);
  EXPECT_EQ(b.total_tokens, b.prompts[0].ids.size() + b.prompts[1].ids.size() + b.prompts[2].ids.size());
}

TEST(RerankPrompt, OnlyTheDocumentIsTruncated) {
  const RerankCase& c = cases()[0];
  const size_t context = c.ids.size() - 3;  // three document tokens too many
  const RerankBatch b = build_rerank_prompts(params_of(c), tokenizer(), tmpl(), context);
  const RerankPrompt& pr = b.prompts[0];
  EXPECT_TRUE(pr.truncated);
  ASSERT_EQ(pr.ids.size(), context);
  const size_t body_end = c.ids.size() - tmpl().suffix.size();
  std::vector<int32_t> want(c.ids.begin(), c.ids.begin() + static_cast<std::ptrdiff_t>(body_end - 3));
  want.insert(want.end(), tmpl().suffix.begin(), tmpl().suffix.end());
  EXPECT_EQ(pr.ids, want);
}

TEST(RerankPrompt, MaxTokensPerDocCapsTheDocument) {
  RerankParams p = params_of(cases()[0]);
  const size_t full = build_rerank_prompts(p, tokenizer(), tmpl(), kContext).prompts[0].ids.size();
  p.max_tokens_per_doc = 2;
  const RerankBatch b = build_rerank_prompts(p, tokenizer(), tmpl(), kContext);
  EXPECT_TRUE(b.prompts[0].truncated);
  const size_t doc_tokens = b.prompts[0].ids.size() - b.shared_prefix - tmpl().suffix.size();
  EXPECT_EQ(doc_tokens, 2u);
  EXPECT_LT(b.prompts[0].ids.size(), full);
}

TEST(RerankPrompt, HugeDocumentIsTruncatedToTheContext) {
  std::string doc;
  for (int i = 0; i < 100000; ++i) doc += "lorem ipsum ";
  const RerankParams p = parse(R"({"query":"q","documents":["short",)" + json_quote(doc) + "]}");
  const RerankBatch b = build_rerank_prompts(p, tokenizer(), tmpl(), 512);
  EXPECT_FALSE(b.prompts[0].truncated);
  EXPECT_TRUE(b.prompts[1].truncated);
  EXPECT_EQ(b.prompts[1].ids.size(), 512u);
  const std::vector<int32_t>& ids = b.prompts[1].ids;
  EXPECT_TRUE(std::equal(tmpl().suffix.begin(), tmpl().suffix.end(), ids.end() - tmpl().suffix.size()));
}

TEST(RerankPrompt, QueryThatLeavesNoRoomIsRefused) {
  const RerankCase& c = cases()[0];
  const RerankParams p = params_of(c);
  const RerankBatch ok = build_rerank_prompts(p, tokenizer(), tmpl(), kContext);
  const size_t without_doc = ok.shared_prefix + tmpl().suffix.size();
  EXPECT_NO_THROW(build_rerank_prompts(p, tokenizer(), tmpl(), without_doc + 1));
  try {
    build_rerank_prompts(p, tokenizer(), tmpl(), without_doc);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "query");
    EXPECT_EQ(std::string(e.what()), "the rerank prompt without the document has " + std::to_string(without_doc) +
                                         " tokens, leaving no room for a document in the model's context of " +
                                         std::to_string(without_doc) + " tokens");
  }
  std::string huge;
  for (int i = 0; i < 100000; ++i) huge += "query ";
  try {
    build_rerank_prompts(parse(R"({"query":)" + json_quote(huge) + kDocs + "}"), tokenizer(), tmpl(), 512);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "query");
    EXPECT_EQ(std::string(e.what()).rfind("the rerank prompt without the document has at least ", 0), 0u) << e.what();
  }
}

// ---- scores and responses -----------------------------------------------------------------------------

TEST(RerankScore, SigmoidOfTheLogitDifference) {
  for (const RerankCase& c : cases()) EXPECT_NEAR(rerank_score(c.yes_logit, c.no_logit), c.score, 1e-6);
  EXPECT_EQ(rerank_score(-1000.0f, 1000.0f), 0.0);
  EXPECT_EQ(rerank_score(1000.0f, -1000.0f), 1.0);
  EXPECT_DOUBLE_EQ(rerank_score(0.5f, 0.25f, /*raw=*/true), 0.25);
}

TEST(RankDocuments, SortsDescendingTiesByIndexAndCuts) {
  const std::vector<double> s{0.2, 0.9, std::numeric_limits<double>::quiet_NaN(), 0.5, 0.9};
  std::vector<size_t> order;
  for (const RankedDocument& r : rank_documents(s, 0)) order.push_back(r.index);
  EXPECT_EQ(order, (std::vector<size_t>{1, 4, 3, 0, 2}));
  EXPECT_EQ(rank_documents(s, 2).size(), 2u);
  EXPECT_EQ(rank_documents(s, 2)[1].index, 4u);
  EXPECT_EQ(rank_documents(s, 50).size(), 5u);  // Open WebUI may send more than there are
}

struct Scored {
  RerankParams params;
  RerankBatch batch;
  std::vector<double> scores;
};

// CJK documents, so the echoed text and the index mapping are checked together.
Scored scored(const std::string& extra, const char* docs_key = "documents") {
  Scored s;
  s.params = parse(R"({"model":"r","query":"서울",")" + std::string(docs_key) +
                   R"(":["東京は首都です","서울은 한국의 수도이다.","Paris"])" + extra + "}");
  s.batch = build_rerank_prompts(s.params, tokenizer(), tmpl(), kContext);
  s.scores = {0.25, 0.75, 0.5};
  return s;
}

TEST(RerankResponse, SortedCutAndMappedToRequestIndex) {
  const Scored s = scored(R"(,"top_n":2,"return_documents":true)");
  const rapidjson::Document d = json(rerank_response_json(s.params, s.batch, s.scores, "rerank-1", "r"));
  EXPECT_STREQ(d["id"].GetString(), "rerank-1");
  EXPECT_STREQ(d["model"].GetString(), "r");
  EXPECT_STREQ(d["object"].GetString(), "list");
  const auto& results = d["results"];
  ASSERT_EQ(results.Size(), 2u);
  EXPECT_EQ(results[0]["index"].GetUint(), 1u);
  EXPECT_EQ(results[0]["relevance_score"].GetDouble(), 0.75);
  EXPECT_STREQ(results[0]["document"]["text"].GetString(), "서울은 한국의 수도이다.");
  EXPECT_EQ(results[1]["index"].GetUint(), 2u);
  EXPECT_STREQ(results[1]["document"]["text"].GetString(), "Paris");
  EXPECT_FALSE(results[0].HasMember("truncated"));
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetUint64(), s.batch.total_tokens);
  EXPECT_EQ(d["usage"]["total_tokens"].GetUint64(), s.batch.total_tokens);
}

TEST(RerankResponse, DifyTopNNullReturnsAllWithDocuments) {
  const Scored s = scored(R"(,"top_n":null,"return_documents":true)");
  const rapidjson::Document d = json(rerank_response_json(s.params, s.batch, s.scores, "x", "r"));
  ASSERT_EQ(d["results"].Size(), 3u);
  EXPECT_EQ(d["results"][2]["index"].GetUint(), 0u);
  EXPECT_STREQ(d["results"][2]["document"]["text"].GetString(), "東京は首都です");
}

TEST(RerankResponse, NoDocumentsByDefaultAndTruncationReported) {
  Scored s = scored("");
  s.batch.prompts[0].truncated = true;
  const rapidjson::Document d = json(rerank_response_json(s.params, s.batch, s.scores, "x", "r"));
  EXPECT_FALSE(d["results"][0].HasMember("document"));
  EXPECT_TRUE(d["results"][2]["truncated"].GetBool());  // index 0, the lowest score
}

TEST(RerankResponse, TeiBareArray) {
  const Scored s = scored(R"(,"return_text":true)", "texts");
  const rapidjson::Document d = json(rerank_response_json(s.params, s.batch, s.scores, "x", "r"));
  ASSERT_TRUE(d.IsArray());
  ASSERT_EQ(d.Size(), 3u);
  EXPECT_EQ(d[0]["index"].GetUint(), 1u);
  EXPECT_EQ(d[0]["score"].GetDouble(), 0.75);
  EXPECT_STREQ(d[0]["text"].GetString(), "서울은 한국의 수도이다.");
  const Scored plain = scored("", "texts");
  EXPECT_FALSE(json(rerank_response_json(plain.params, plain.batch, plain.scores, "x", "r"))[0].HasMember("text"));
}

TEST(RerankResponse, ScoreDataInRequestOrder) {
  RerankParams p = parse_score(R"({"text_1":"q","text_2":["a","b"]})");
  const RerankBatch b = build_rerank_prompts(p, tokenizer(), tmpl(), kContext);
  const rapidjson::Document d = json(rerank_response_json(p, b, {0.1, 0.9}, "score-1", "r"));
  ASSERT_EQ(d["data"].Size(), 2u);
  EXPECT_EQ(d["data"][0]["index"].GetUint(), 0u);
  EXPECT_STREQ(d["data"][0]["object"].GetString(), "score");
  EXPECT_EQ(d["data"][0]["score"].GetDouble(), 0.1);
  EXPECT_EQ(d["data"][1]["score"].GetDouble(), 0.9);
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetUint64(), b.total_tokens);
}

TEST(RerankResponse, NaNScoreIsNullAndCountsMustMatch) {
  const Scored s = scored("");
  const std::vector<double> nan{std::numeric_limits<double>::quiet_NaN(), 0.5, 0.25};
  const rapidjson::Document d = json(rerank_response_json(s.params, s.batch, nan, "x", "r"));
  EXPECT_TRUE(d["results"][2]["relevance_score"].IsNull());
  EXPECT_THROW(rerank_response_json(s.params, s.batch, {0.5}, "x", "r"), std::invalid_argument);
}

}  // namespace
}  // namespace ds::openai
