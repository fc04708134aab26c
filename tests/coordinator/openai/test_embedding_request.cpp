// /v1/embeddings request layer: every accepted body shape and every refusal (status, param and
// message), the reference token ids (literal text + exactly one <|endoftext|>), the limits, and
// the output: dimensions slice + re-normalisation, base64, float round trips.
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/http/api_error.h"
#include "coordinator/openai/embedding_request.h"
#include "coordinator/openai/json_fields.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "tests/testutil/testutil.h"

namespace ds::openai {
namespace {

constexpr int32_t kEndOfText = 151643;

const Tokenizer& embed_tokenizer() {
  static const auto tok =
      std::make_unique<Tokenizer>(Tokenizer::from_file(test::data_path("tiny-qwen3-embed-q8_0.gguf")));
  return *tok;
}

const Tokenizer& rerank_tokenizer() {
  static const auto tok =
      std::make_unique<Tokenizer>(Tokenizer::from_file(test::data_path("tiny-qwen3-rerank-q8_0.gguf")));
  return *tok;
}

struct EmbedCase {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> embedding;
  std::vector<float> embedding_dim32;
};

std::vector<float> floats(const rapidjson::Value& a) {
  std::vector<float> out;
  for (const auto& v : a.GetArray()) out.push_back(static_cast<float>(v.GetDouble()));
  return out;
}

// fixtures.qwen3_embed.cases of the shared reference manifest (transformers float32).
const std::vector<EmbedCase>& embed_cases() {
  static const std::vector<EmbedCase> cases = [] {
    const std::vector<uint8_t> bytes = test::read_file(test::data_path("embed_rerank_request_cases.json"));
    rapidjson::Document d;
    d.Parse(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    std::vector<EmbedCase> out;
    for (const auto& c : d["embed"]["cases"].GetArray()) {
      EmbedCase e;
      e.text = to_string(c["text"]);
      for (const auto& id : c["ids"].GetArray()) e.ids.push_back(id.GetInt());
      e.embedding = floats(c["embedding"]);
      e.embedding_dim32 = floats(c["embedding_dim32"]);
      out.push_back(std::move(e));
    }
    return out;
  }();
  return cases;
}

EmbeddingModel tiny_model() {
  EmbeddingModel m;
  m.n_vocab = 151936;
  m.native_dim = 64;
  m.context = 4096;
  return m;
}

EmbeddingParams parse(const std::string& body, const EmbeddingModel& m = tiny_model()) {
  const rapidjson::Document d = parse_body(body);
  return parse_embedding_params(d, m);
}

EmbeddingBatch tokenize(const std::string& body, const EmbeddingModel& m = tiny_model()) {
  const Tokenizer& tok = embed_tokenizer();
  return tokenize_embedding_inputs(parse(body, m), tok, embedding_eos_id(tok, true), m);
}

std::string json_string(const std::string& s) {
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return sb.GetString();
}

// ---- accepted shapes --------------------------------------------------------------------------------

TEST(EmbeddingParams, StringInputWithDefaults) {
  const EmbeddingParams p = parse(R"({"model":"m","input":"hello","user":"u1"})");
  EXPECT_EQ(p.model, "m");
  ASSERT_EQ(p.inputs.size(), 1u);
  EXPECT_EQ(p.inputs[0].text, "hello");
  EXPECT_EQ(p.encoding, EmbeddingEncoding::kFloat);
  EXPECT_FALSE(p.dimensions);
  EXPECT_TRUE(p.normalize);
  EXPECT_FALSE(p.truncate_tokens);
}

TEST(EmbeddingParams, ArrayOfStringsKeepsOrder) {
  const EmbeddingParams p = parse(R"({"input":["a","b","c"]})");
  ASSERT_EQ(p.inputs.size(), 3u);
  EXPECT_EQ(p.inputs[2].text, "c");
}

TEST(EmbeddingParams, TokenIdArrayIsOneInput) {
  const EmbeddingParams p = parse(R"({"input":[1782,8251,7578]})");
  ASSERT_EQ(p.inputs.size(), 1u);
  EXPECT_FALSE(p.inputs[0].text);
  EXPECT_EQ(p.inputs[0].ids, (std::vector<int32_t>{1782, 8251, 7578}));
}

TEST(EmbeddingParams, ArrayOfTokenArraysIsSeveralInputs) {
  const EmbeddingParams p = parse(R"({"input":[[1,2],[3]]})");
  ASSERT_EQ(p.inputs.size(), 2u);
  EXPECT_EQ(p.inputs[1].ids, (std::vector<int32_t>{3}));
}

TEST(EmbeddingParams, ContentIsAnAliasOfInput) {
  const EmbeddingParams p = parse(R"({"content":"hi"})");
  ASSERT_EQ(p.inputs.size(), 1u);
  EXPECT_EQ(p.inputs[0].text, "hi");
  EXPECT_EQ(p.input_param, "content");
}

TEST(EmbeddingParams, OutputOptions) {
  const EmbeddingParams p =
      parse(R"({"input":"x","encoding_format":"base64","dimensions":32,"normalize":false,"truncate_prompt_tokens":7})");
  EXPECT_EQ(p.encoding, EmbeddingEncoding::kBase64);
  EXPECT_EQ(p.dimensions, 32u);
  EXPECT_FALSE(p.normalize);
  EXPECT_EQ(p.truncate_tokens, 7u);
  EXPECT_EQ(parse(R"({"input":"x","truncate_prompt_tokens":-1})").truncate_tokens, 4096u);
  EXPECT_FALSE(parse(R"({"input":"x","embd_normalize":-1})").normalize);
  EXPECT_TRUE(parse(R"({"input":"x","embd_normalize":2})").normalize);
  EXPECT_EQ(parse(R"({"input":"x","encoding_format":"float"})").encoding, EmbeddingEncoding::kFloat);
}

TEST(EmbeddingParams, DimensionsFromOneToNativeAreAccepted) {
  EXPECT_EQ(parse(R"({"input":"x","dimensions":64})").dimensions, 64u);  // native: any model
  EXPECT_EQ(parse(R"({"input":"x","dimensions":1})").dimensions, 1u);
  EXPECT_FALSE(parse(R"({"input":"x","dimensions":null,"encoding_format":null})").dimensions);
}

TEST(EmbeddingParams, AtMostMaxInputsStrings) {
  EmbeddingModel m = tiny_model();
  m.max_inputs = 3;
  EXPECT_EQ(parse(R"({"input":["a","b","c"]})", m).inputs.size(), 3u);
  // A token-id array is one input whatever its length.
  EXPECT_EQ(parse(R"({"input":[1,2,3,4,5]})", m).inputs.size(), 1u);
}

// ---- refusals ----------------------------------------------------------------------------------------

struct BadBody {
  std::string body;
  std::string param;
  std::string message;
};

class EmbeddingRefusal : public ::testing::TestWithParam<BadBody> {};

TEST_P(EmbeddingRefusal, NamesTheFieldAndTheProblem) {
  const BadBody& c = GetParam();
  try {
    parse(c.body);
    FAIL() << "accepted " << c.body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), c.param) << c.body;
    EXPECT_EQ(std::string(e.what()), c.message) << c.body;
  }
}

const std::string kShapes =
    "' must be a string, an array of strings, an array of token ids or an array of token-id arrays";
const std::string kNotId = " is not a token id (the vocabulary has 151936 tokens)";

INSTANTIATE_TEST_SUITE_P(
    Bodies, EmbeddingRefusal,
    ::testing::Values(
        BadBody{R"({})", "input", "'input' is required"}, BadBody{R"({"input":null})", "input", "'input' is required"},
        BadBody{R"({"input":""})", "input", "'input' must not be an empty string"},
        BadBody{R"({"content":""})", "content", "'content' must not be an empty string"},
        BadBody{R"({"input":[]})", "input", "'input' must not be an empty array"},
        BadBody{R"({"input":5})", "input", "'input" + kShapes},
        BadBody{R"({"input":{"text":"x"}})", "input", "'input" + kShapes},
        BadBody{R"({"input":["a",""]})", "input", "input[1] must not be an empty string"},
        BadBody{R"({"input":["a",1]})", "input", "'input' mixes types: input[0] is a string, input[1] is a token id"},
        BadBody{R"({"input":[1,"a"]})", "input", "'input' mixes types: input[0] is a token id, input[1] is a string"},
        BadBody{R"({"input":[[1],2]})", "input",
                "'input' mixes types: input[0] is an array of token ids, input[1] is a token id"},
        BadBody{R"({"input":["a",null]})", "input",
                "'input' mixes types: input[0] is a string, input[1] is neither a string nor a token id"},
        BadBody{R"({"input":[{}]})", "input", "input[0] must be a string, a token id or an array of token ids"},
        BadBody{R"({"input":[[1],[]]})", "input", "'input[1]' must not be an empty array"},
        BadBody{R"({"input":[1.5]})", "input", "input[0] must be an integer token id"},
        BadBody{R"({"input":[151936]})", "input", "input[0] = 151936" + kNotId},
        BadBody{R"({"input":[-1]})", "input", "input[0] = -1" + kNotId},
        BadBody{R"({"input":[[5],[7,999999]]})", "input", "input[1][1] = 999999" + kNotId},
        BadBody{R"({"input":"x","encoding_format":"int8"})", "encoding_format",
                "'encoding_format' must be \"float\" or \"base64\", got \"int8\""},
        BadBody{R"({"input":"x","encoding_format":1})", "encoding_format", "'encoding_format' must be a string"},
        BadBody{R"({"input":"x","dimensions":65})", "dimensions",
                "'dimensions' must be between 1 and 64 (the model's embedding size), got 65"},
        BadBody{R"({"input":"x","dimensions":0})", "dimensions",
                "'dimensions' must be between 1 and 64 (the model's embedding size), got 0"},
        BadBody{R"({"input":"x","dimensions":-32})", "dimensions",
                "'dimensions' must be between 1 and 64 (the model's embedding size), got -32"},
        BadBody{R"({"input":"x","dimensions":32.5})", "dimensions", "'dimensions' must be an integer"},
        BadBody{R"({"input":"x","normalize":"yes"})", "normalize", "'normalize' must be a boolean"},
        BadBody{R"({"input":"x","embd_normalize":1})", "embd_normalize",
                "'embd_normalize' must be 2 (L2) or -1 (none), got 1"},
        BadBody{R"({"input":"x","truncate_prompt_tokens":0})", "truncate_prompt_tokens",
                "'truncate_prompt_tokens' must be -1 (the context) or between 1 and 4096 (the model's context), got 0"},
        BadBody{R"({"input":"x","truncate_prompt_tokens":5000})", "truncate_prompt_tokens",
                "'truncate_prompt_tokens' must be -1 (the context) or between 1 and 4096 (the model's context), got "
                "5000"},
        BadBody{R"({"input":"x","model":5})", "model", "'model' must be a string"},
        BadBody{R"({"input":"x","user":5})", "user", "'user' must be a string"}));

TEST(EmbeddingParams, MoreThanMaxInputsIsRefused) {
  std::string body = R"({"input":[)";
  for (size_t i = 0; i <= kMaxEmbeddingInputs; ++i) body += (i == 0 ? "\"a\"" : ",\"a\"");
  body += "]}";
  try {
    parse(body);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "input");
    EXPECT_EQ(std::string(e.what()), "'input' holds 2049 inputs, at most 2048 are allowed");
  }
}

// ---- tokens ------------------------------------------------------------------------------------------

TEST(EmbeddingEos, IsEndOfTextForQwen3EmbeddingModels) {
  // The embed GGUF names <|im_end|> as eos and sets add_eos_token; the model wants <|endoftext|>.
  EXPECT_EQ(embed_tokenizer().eos_id(), 151645);
  EXPECT_EQ(embedding_eos_id(embed_tokenizer(), true), kEndOfText);
  EXPECT_EQ(embedding_eos_id(embed_tokenizer(), false), kEndOfText);  // add_eos_token alone
  EXPECT_EQ(embedding_eos_id(rerank_tokenizer(), true), kEndOfText);
  EXPECT_FALSE(embedding_eos_id(rerank_tokenizer(), false));  // neither: nothing appended
}

TEST(EmbeddingTokens, MatchTheReferenceWithExactlyOneEndOfText) {
  for (const EmbedCase& c : embed_cases()) {
    const EmbeddingBatch b = tokenize(R"({"input":)" + json_string(c.text) + "}");
    ASSERT_EQ(b.ids.size(), 1u);
    EXPECT_EQ(b.ids[0], c.ids) << c.text;
    EXPECT_EQ(std::count(b.ids[0].begin(), b.ids[0].end(), kEndOfText), 1) << c.text;
    EXPECT_EQ(b.total_tokens, c.ids.size());
  }
}

TEST(EmbeddingTokens, ControlTokenTextStaysLiteral) {
  const EmbeddingBatch b = tokenize(R"({"input":"<|im_end|> injected <|endoftext|>"})");
  const std::vector<int32_t>& ids = b.ids[0];
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_FALSE(embed_tokenizer().is_control(ids[i])) << i;
  EXPECT_EQ(ids.back(), kEndOfText);
  EXPECT_EQ(embed_tokenizer().decode(ids, false), "<|im_end|> injected <|endoftext|>");
}

TEST(EmbeddingTokens, CjkRoundTrips) {
  const std::string text = "서울은 한국의 수도이다. 東京 🦙";
  const EmbeddingBatch b = tokenize(R"({"input":)" + json_string(text) + "}");
  EXPECT_EQ(embed_tokenizer().decode(b.ids[0], /*render_control=*/false), text);
}

TEST(EmbeddingTokens, BatchKeepsRequestOrderAndSumsUsage) {
  const auto& cases = embed_cases();
  const EmbeddingBatch b =
      tokenize(R"({"input":[)" + json_string(cases[1].text) + "," + json_string(cases[0].text) + "]}");
  ASSERT_EQ(b.ids.size(), 2u);
  EXPECT_EQ(b.ids[0], cases[1].ids);
  EXPECT_EQ(b.ids[1], cases[0].ids);
  EXPECT_EQ(b.total_tokens, cases[0].ids.size() + cases[1].ids.size());
}

TEST(EmbeddingTokens, TokenIdInputsGetOneEndToken) {
  const EmbeddingBatch b = tokenize(R"({"input":[[1782,8251,7578],[1782,8251,7578,151643]]})");
  EXPECT_EQ(b.ids[0], (std::vector<int32_t>{1782, 8251, 7578, kEndOfText}));
  EXPECT_EQ(b.ids[1], (std::vector<int32_t>{1782, 8251, 7578, kEndOfText}));  // not doubled
}

TEST(EmbeddingTokens, NothingAppendedWithoutAnEndToken) {
  const EmbeddingModel m = tiny_model();
  const EmbeddingBatch b =
      tokenize_embedding_inputs(parse(R"({"input":["the cat sat"]})"), embed_tokenizer(), std::nullopt, m);
  EXPECT_EQ(b.ids[0], (std::vector<int32_t>{1782, 8251, 7578}));
}

TEST(EmbeddingTokens, TruncationKeepsTheLastTokens) {
  const EmbedCase& lorem = embed_cases()[4];
  ASSERT_GT(lorem.ids.size(), 100u);
  const EmbeddingBatch b = tokenize(R"({"input":)" + json_string(lorem.text) + R"(,"truncate_prompt_tokens":10})");
  EXPECT_EQ(b.ids[0], std::vector<int32_t>(lorem.ids.end() - 10, lorem.ids.end()));
  const EmbeddingBatch ids = tokenize(R"({"input":[[1,2,3,4,5]],"truncate_prompt_tokens":3})");
  EXPECT_EQ(ids.ids[0], (std::vector<int32_t>{4, 5, kEndOfText}));
  const EmbeddingBatch one = tokenize(R"({"input":"the cat sat","truncate_prompt_tokens":1})");
  EXPECT_EQ(one.ids[0], (std::vector<int32_t>{kEndOfText}));
}

void expect_refusal(const std::string& body, const EmbeddingModel& m, const std::string& message) {
  try {
    tokenize(body, m);
    FAIL() << "accepted " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "input");
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(EmbeddingLimits, InputOverTheContextNamesItsIndexAndLength) {
  EmbeddingModel m = tiny_model();
  m.context = 100;
  const EmbedCase& lorem = embed_cases()[4];  // 184 tokens with its end token
  expect_refusal(R"({"input":["the cat sat",)" + json_string(lorem.text) + "]}", m,
                 "input[1] has 184 tokens, the model's context is 100");
  std::string ids = "[[1";
  for (int i = 0; i < 100; ++i) ids += ",1";
  expect_refusal(R"({"input":)" + ids + "]]}", m, "input[0] has 102 tokens, the model's context is 100");
}

TEST(EmbeddingLimits, RequestTokenLimitCountsEveryInput) {
  EmbeddingModel m = tiny_model();
  m.max_request_tokens = 10;
  expect_refusal(R"({"input":[[1,2,3],[1,2,3],[1,2,3]]})", m,
                 "the inputs have 12 tokens together, at most 10 are allowed per request");
  EXPECT_EQ(tokenize(R"({"input":[[1,2,3],[1,2,3]]})", m).total_tokens, 8u);
}

TEST(EmbeddingLimits, HugeTextStopsAtTheBudget) {
  EmbeddingModel m = tiny_model();
  m.context = 20;
  m.max_request_tokens = 40;
  std::string text;
  for (int i = 0; i < 200000; ++i) text += "lorem ";
  try {
    tokenize(R"({"input":)" + json_string(text) + "}", m);
    FAIL();
  } catch (const ApiError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("input[0] has at least ", 0), 0u) << msg;
    EXPECT_NE(msg.find(" tokens, the model's context is 20"), std::string::npos) << msg;
  }
}

// ---- text cuts ----------------------------------------------------------------------------------------

TEST(TextCuts, KeepTheTokensAtTheKeptEnd) {
  const Tokenizer& tok = embed_tokenizer();
  std::string text;
  for (int i = 0; i < 20000; ++i) text += (i % 7 == 0 ? "Lorem, ipsum " : "dolor sit amet ");
  const std::vector<int32_t> all = tok.encode(text, false);
  const size_t n = 50;
  const std::string_view head = leading_text_for_tokens(text, n, tok.max_token_bytes());
  const std::string_view tail = trailing_text_for_tokens(text, n, tok.max_token_bytes());
  ASSERT_LT(head.size(), text.size());
  ASSERT_LT(tail.size(), text.size());
  const std::vector<int32_t> head_ids = tok.encode(head, false);
  const std::vector<int32_t> tail_ids = tok.encode(tail, false);
  ASSERT_GE(head_ids.size(), n);
  ASSERT_GE(tail_ids.size(), n);
  EXPECT_EQ(std::vector<int32_t>(head_ids.begin(), head_ids.begin() + n),
            std::vector<int32_t>(all.begin(), all.begin() + n));
  EXPECT_EQ(std::vector<int32_t>(tail_ids.end() - n, tail_ids.end()), std::vector<int32_t>(all.end() - n, all.end()));
}

TEST(TextCuts, ShortTextIsKeptWholeAndCutsRespectUtf8) {
  EXPECT_EQ(leading_text_for_tokens("short text", 10, 16), "short text");
  EXPECT_EQ(trailing_text_for_tokens("short text", 10, 16), "short text");
  std::string cjk;
  for (int i = 0; i < 100000; ++i) cjk += "東京";  // no spaces: cut at a character boundary
  const std::string_view head = leading_text_for_tokens(cjk, 10, 16);
  const std::string_view tail = trailing_text_for_tokens(cjk, 10, 16);
  EXPECT_EQ(head.size() % 3, 0u);
  EXPECT_EQ(tail.size() % 3, 0u);
  EXPECT_LT(head.size(), cjk.size());
  EXPECT_GE(head.size(), 11u * 16);
}

// ---- output ---------------------------------------------------------------------------------------------

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << i;
}

TEST(FinishEmbedding, DimensionsSliceThenRenormaliseLikeTheReference) {
  for (const EmbedCase& c : embed_cases()) {
    expect_near_all(finish_embedding(c.embedding, 32, true), c.embedding_dim32, 2e-6f);
    expect_near_all(finish_embedding(c.embedding, std::nullopt, true), c.embedding, 2e-6f);
  }
}

TEST(FinishEmbedding, NormalizeFalseKeepsTheRawSlice) {
  const std::vector<float> v{3.0f, 4.0f, 12.0f};
  EXPECT_EQ(finish_embedding(v, 2, false), (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(finish_embedding(v, 2, true), (std::vector<float>{0.6f, 0.8f}));
  EXPECT_EQ(finish_embedding(std::vector<float>{0.0f, 0.0f}, std::nullopt, true), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_THROW(finish_embedding(v, 4, true), std::invalid_argument);
}

std::vector<uint8_t> base64_decode(const std::string& s) {
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : s) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(alphabet.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

TEST(Base64, KnownBytesAndRoundTrip) {
  EXPECT_EQ(base64_f32(std::vector<float>{1.0f}), "AACAPw==");  // 00 00 80 3F
  EXPECT_EQ(base64_f32(std::vector<float>{}), "");
  for (const EmbedCase& c : embed_cases()) {
    for (size_t n : {size_t{64}, size_t{63}, size_t{62}}) {  // every padding length
      const std::vector<float> v(c.embedding.begin(), c.embedding.begin() + static_cast<std::ptrdiff_t>(n));
      const std::string b64 = base64_f32(v);
      EXPECT_EQ(b64.size(), (n * 4 + 2) / 3 * 4);
      const std::vector<uint8_t> bytes = base64_decode(b64);
      ASSERT_EQ(bytes.size(), n * 4);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t u = bytes[4 * i] | (bytes[4 * i + 1] << 8) | (bytes[4 * i + 2] << 16) |
                           (static_cast<uint32_t>(bytes[4 * i + 3]) << 24);
        EXPECT_EQ(std::bit_cast<float>(u), v[i]) << i;
      }
    }
  }
}

TEST(EmbeddingResponse, FloatsRoundTripExactly) {
  const std::vector<float> tricky{0.1f, -0.0f, 1e-45f, FLT_MAX, -FLT_MIN, 1.0f / 3.0f, 123456.789f};
  const std::vector<std::vector<float>> vectors{tricky, embed_cases()[0].embedding};
  const std::string body = embedding_response_json("tiny", vectors, EmbeddingEncoding::kFloat, 12);
  rapidjson::Document d;
  d.Parse(body.c_str(), body.size());
  ASSERT_FALSE(d.HasParseError()) << body;
  EXPECT_STREQ(d["object"].GetString(), "list");
  EXPECT_STREQ(d["model"].GetString(), "tiny");
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetUint(), 12u);
  EXPECT_EQ(d["usage"]["total_tokens"].GetUint(), 12u);
  ASSERT_EQ(d["data"].Size(), 2u);
  for (rapidjson::SizeType i = 0; i < 2; ++i) {
    const auto& item = d["data"][i];
    EXPECT_STREQ(item["object"].GetString(), "embedding");
    EXPECT_EQ(item["index"].GetUint(), i);
    const std::vector<float> back = floats(item["embedding"]);
    ASSERT_EQ(back.size(), vectors[i].size());
    // Value equality: RapidJSON reads "-0" as the integer 0 (the text is checked below).
    for (size_t k = 0; k < back.size(); ++k) EXPECT_EQ(back[k], vectors[i][k]) << k;
  }
  EXPECT_NE(body.find("[0.1,-0,1e-45,"), std::string::npos) << body;  // shortest float32 forms
}

TEST(EmbeddingResponse, Base64BodyDecodesToTheFloats) {
  const std::vector<float>& v = embed_cases()[3].embedding;
  const std::string body = embedding_response_json("m", {v}, EmbeddingEncoding::kBase64, 15);
  rapidjson::Document d;
  d.Parse(body.c_str(), body.size());
  ASSERT_TRUE(d["data"][0]["embedding"].IsString());
  const std::vector<uint8_t> bytes = base64_decode(d["data"][0]["embedding"].GetString());
  ASSERT_EQ(bytes.size(), v.size() * 4);
  std::vector<float> back(v.size());
  std::memcpy(back.data(), bytes.data(), bytes.size());  // little-endian host
  EXPECT_EQ(back, v);
}

TEST(EmbeddingResponse, NonFiniteValuesBecomeNull) {
  const std::string body = embedding_response_json(
      "m", {{std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 1.0f}},
      EmbeddingEncoding::kFloat, 1);
  EXPECT_NE(body.find("[null,null,1]"), std::string::npos) << body;
}

}  // namespace
}  // namespace ds::openai
