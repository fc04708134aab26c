#include "coordinator/openai/rerank_request.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "coordinator/http/api_error.h"
#include "coordinator/openai/embedding_request.h"
#include "coordinator/openai/json_fields.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds::openai {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

std::optional<int64_t> get_integer(const rapidjson::Value& req, const char* name) {
  const rapidjson::Value* v = field(req, name);
  if (v == nullptr) return std::nullopt;
  if (!v->IsInt64()) bad(name, std::string("'") + name + "' must be an integer");
  return v->GetInt64();
}

// A string, or an object carrying it as "text" (Jina's and Cohere v1's document objects).
std::string text_of(const rapidjson::Value& v, const std::string& param, const std::string& where) {
  if (v.IsString()) return to_string(v);
  if (v.IsObject()) {
    const rapidjson::Value* text = field(v, "text");
    if (text != nullptr && text->IsString()) return to_string(*text);
  }
  bad(param, where + " must be a string or an object with a \"text\" string");
}

std::string parse_query(const rapidjson::Value& req, const char* name) {
  const rapidjson::Value* v = field(req, name);
  if (v == nullptr) bad(name, std::string("'") + name + "' is required");
  std::string q = text_of(*v, name, std::string("'") + name + "'");
  if (q.empty()) bad(name, std::string("'") + name + "' must not be empty");
  return q;
}

// An array of strings / {"text"} objects (or, with `allow_string`, one string).
std::vector<std::string> parse_texts(const rapidjson::Value& v, const std::string& param, size_t max_documents,
                                     bool allow_string) {
  if (allow_string && v.IsString()) return {to_string(v)};
  if (!v.IsArray()) bad(param, "'" + param + "' must be an array of strings or of {\"text\": ...} objects");
  if (v.Empty()) bad(param, "'" + param + "' must not be empty");
  if (v.Size() > max_documents) {
    bad(param, "'" + param + "' holds " + std::to_string(v.Size()) + " documents, at most " +
                   std::to_string(max_documents) + " are allowed");
  }
  std::vector<std::string> out;
  out.reserve(v.Size());
  for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
    out.push_back(text_of(v[i], param, param + "[" + std::to_string(i) + "]"));
  }
  return out;
}

void parse_documents(const rapidjson::Value& req, size_t max_documents, RerankParams& p) {
  const rapidjson::Value* docs = field(req, "documents");
  const rapidjson::Value* texts = field(req, "texts");
  if (docs != nullptr && texts != nullptr) bad("texts", "Give 'documents' or 'texts', not both");
  if (docs == nullptr && texts == nullptr) bad("documents", "'documents' is required");
  if (texts != nullptr) p.api = RerankApi::kTei;
  p.documents = parse_texts(docs != nullptr ? *docs : *texts, docs != nullptr ? "documents" : "texts", max_documents,
                            /*allow_string=*/false);
}

void parse_options(const rapidjson::Value& req, RerankParams& p) {
  // Dify sends top_n: null and Open WebUI len(documents): both mean all.
  if (const auto n = get_integer(req, "top_n")) {
    if (*n < 0) bad("top_n", "'top_n' must be 0 (all) or positive, got " + std::to_string(*n));
    p.top_n = static_cast<size_t>(*n);
  }
  p.return_documents = get_bool(req, "return_documents").value_or(false);
  if (p.api == RerankApi::kTei) p.return_documents = get_bool(req, "return_text").value_or(p.return_documents);
  p.raw_scores = get_bool(req, "raw_scores").value_or(false);
  if (auto i = get_string(req, "instruction")) {
    p.instruction = std::move(*i);
  } else if (auto s = get_string(req, "instruct")) {  // SGLang's name
    p.instruction = std::move(*s);
  }
  if (const auto m = get_integer(req, "max_tokens_per_doc")) {
    if (*m < 1) bad("max_tokens_per_doc", "'max_tokens_per_doc' must be positive, got " + std::to_string(*m));
    p.max_tokens_per_doc = static_cast<size_t>(*m);
  }
}

}  // namespace

RerankParams parse_rerank_params(const rapidjson::Value& req, size_t max_documents) {
  RerankParams p;
  p.model = get_string(req, "model").value_or("");
  p.query = parse_query(req, "query");
  parse_documents(req, max_documents, p);
  parse_options(req, p);
  return p;
}

RerankParams parse_score_params(const rapidjson::Value& req, size_t max_documents) {
  RerankParams p;
  p.api = RerankApi::kScore;
  p.model = get_string(req, "model").value_or("");
  if (const rapidjson::Value* t1 = field(req, "text_1"); t1 != nullptr && t1->IsArray()) {
    bad("text_1", "'text_1' must be one string (lists of pairs are not supported)");
  }
  p.query = parse_query(req, "text_1");
  const rapidjson::Value* t2 = field(req, "text_2");
  if (t2 == nullptr) bad("text_2", "'text_2' is required");
  p.documents = parse_texts(*t2, "text_2", max_documents, /*allow_string=*/true);
  parse_options(req, p);
  return p;
}

RerankTemplate make_rerank_template(const Tokenizer& tok) {
  for (const char* name : {"<|im_start|>", "<|im_end|>"}) {
    const std::optional<int32_t> id = tok.find_token(name);
    if (!id || !tok.is_control(*id)) {
      throw std::runtime_error(std::string("the vocabulary has no control token ") + name +
                               ", which the reranker prompt needs");
    }
  }
  return {tok.encode(kRerankPrefix, /*parse_control=*/true), tok.encode(kRerankSuffix, /*parse_control=*/true)};
}

namespace {

[[noreturn]] void query_too_long(size_t n, bool at_least, size_t context) {
  bad("query", std::string("the rerank prompt without the document has ") + (at_least ? "at least " : "") +
                   std::to_string(n) + " tokens, leaving no room for a document in the model's context of " +
                   std::to_string(context) + " tokens");
}

// Everything of the body before the document's text. The body always continues with a space
// after "<Document>:", where Qwen's pre-tokenizers always cut, so the body's tokens are these
// tokens followed by those of " " + document: every pair shares them.
std::string body_head(const RerankParams& p) {
  return "<Instruct>: " + p.instruction + "\n<Query>: " + p.query + "\n<Document>:";
}

// The first `budget` tokens of " " + document, and whether that cut anything.
std::vector<int32_t> document_tokens(const std::string& doc, const Tokenizer& tok, size_t budget, bool& truncated) {
  const std::string tail = " " + doc;
  std::vector<int32_t> ids =
      tok.encode(leading_text_for_tokens(tail, budget, tok.max_token_bytes()), /*parse_control=*/false);
  truncated = ids.size() > budget;
  if (truncated) ids.resize(budget);
  return ids;
}

}  // namespace

RerankBatch build_rerank_prompts(const RerankParams& p, const Tokenizer& tok, const RerankTemplate& t, size_t context) {
  const size_t fixed = t.prefix.size() + t.suffix.size();
  const size_t body_budget = context - std::min(context, fixed);
  std::vector<int32_t> head;
  try {
    head = tok.encode(body_head(p), /*parse_control=*/false, body_budget);
  } catch (const TokenBudgetExceeded& e) {
    query_too_long(fixed + e.at_least(), true, context);
  }
  if (head.size() >= body_budget) query_too_long(fixed + head.size(), false, context);
  const size_t doc_budget = std::min(body_budget - head.size(), p.max_tokens_per_doc.value_or(body_budget));

  RerankBatch batch;
  batch.shared_prefix = t.prefix.size() + head.size();
  batch.prompts.reserve(p.documents.size());
  for (const std::string& doc : p.documents) {
    RerankPrompt prompt;
    const std::vector<int32_t> doc_ids = document_tokens(doc, tok, doc_budget, prompt.truncated);
    prompt.ids.reserve(fixed + head.size() + doc_ids.size());
    prompt.ids.insert(prompt.ids.end(), t.prefix.begin(), t.prefix.end());
    prompt.ids.insert(prompt.ids.end(), head.begin(), head.end());
    prompt.ids.insert(prompt.ids.end(), doc_ids.begin(), doc_ids.end());
    prompt.ids.insert(prompt.ids.end(), t.suffix.begin(), t.suffix.end());
    batch.total_tokens += prompt.ids.size();
    batch.prompts.push_back(std::move(prompt));
  }
  return batch;
}

double rerank_score(float yes_logit, float no_logit, bool raw) {
  const double d = static_cast<double>(yes_logit) - static_cast<double>(no_logit);
  if (raw) return d;
  return 1.0 / (1.0 + std::exp(-d));  // exp overflows to inf for d << 0: the score is then 0, never NaN
}

std::vector<RankedDocument> rank_documents(const std::vector<double>& scores, size_t top_n) {
  std::vector<RankedDocument> ranked(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) ranked[i] = {i, scores[i]};
  // NaN compares as the lowest score, so the order stays a strict weak ordering.
  const auto key = [](double s) { return std::isnan(s) ? -std::numeric_limits<double>::infinity() : s; };
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](const RankedDocument& a, const RankedDocument& b) { return key(a.score) > key(b.score); });
  if (top_n != 0 && top_n < ranked.size()) ranked.resize(top_n);
  return ranked;
}

// ---- responses -----------------------------------------------------------------------------------

namespace {

void str(JsonWriter& w, const std::string& s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

void score_value(JsonWriter& w, double s) {
  if (std::isfinite(s)) {
    w.Double(s);
  } else {
    w.Null();  // JSON has no NaN
  }
}

void usage_object(JsonWriter& w, size_t tokens) {
  w.Key("usage");
  w.StartObject();
  w.Key("prompt_tokens");
  w.Uint64(tokens);
  w.Key("total_tokens");
  w.Uint64(tokens);
  w.EndObject();
}

void rerank_results(JsonWriter& w, const RerankParams& p, const RerankBatch& batch,
                    const std::vector<RankedDocument>& ranked) {
  w.Key("results");
  w.StartArray();
  for (const RankedDocument& r : ranked) {
    w.StartObject();
    w.Key("index");
    w.Uint64(r.index);
    w.Key("relevance_score");
    score_value(w, r.score);
    if (p.return_documents) {
      w.Key("document");
      w.StartObject();
      w.Key("text");
      str(w, p.documents[r.index]);
      w.EndObject();
    }
    if (r.index < batch.prompts.size() && batch.prompts[r.index].truncated) {
      w.Key("truncated");
      w.Bool(true);
    }
    w.EndObject();
  }
  w.EndArray();
}

void tei_results(JsonWriter& w, const RerankParams& p, const std::vector<RankedDocument>& ranked) {
  w.StartArray();
  for (const RankedDocument& r : ranked) {
    w.StartObject();
    w.Key("index");
    w.Uint64(r.index);
    w.Key("score");
    score_value(w, r.score);
    if (p.return_documents) {
      w.Key("text");
      str(w, p.documents[r.index]);
    }
    w.EndObject();
  }
  w.EndArray();
}

void score_data(JsonWriter& w, const std::vector<double>& scores) {
  w.Key("data");
  w.StartArray();
  for (size_t i = 0; i < scores.size(); ++i) {
    w.StartObject();
    w.Key("index");
    w.Uint64(i);
    w.Key("object");
    w.String("score");
    w.Key("score");
    score_value(w, scores[i]);
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace

std::string rerank_response_json(const RerankParams& p, const RerankBatch& batch, const std::vector<double>& scores,
                                 const std::string& id, const std::string& model) {
  if (scores.size() != p.documents.size()) {
    throw std::invalid_argument("rerank_response_json: " + std::to_string(scores.size()) + " scores for " +
                                std::to_string(p.documents.size()) + " documents");
  }
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  if (p.api == RerankApi::kTei) {
    tei_results(w, p, rank_documents(scores, p.top_n));
    return {sb.GetString(), sb.GetSize()};
  }
  w.StartObject();
  w.Key("id");
  str(w, id);
  w.Key("model");
  str(w, model);
  w.Key("object");
  w.String("list");
  if (p.api == RerankApi::kScore) {
    score_data(w, scores);
  } else {
    rerank_results(w, p, batch, rank_documents(scores, p.top_n));
  }
  usage_object(w, batch.total_tokens);
  w.EndObject();
  return {sb.GetString(), sb.GetSize()};
}

}  // namespace ds::openai
