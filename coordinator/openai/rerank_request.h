// Reranking at the request layer (POST /v1/rerank, /rerank, /v2/rerank; vLLM's /v1/score): the
// body's fields, the Qwen3-Reranker prompt built at token level, the score and the response
// bodies. Pure functions: no engine, no HTTP.
//
// Request (Jina / Cohere / llama-server / vLLM / Dify / Open WebUI bodies; unknown fields ignored):
//   query: a non-empty string (or {"text": ...}).
//   documents: an array of strings or {"text": ...} objects, 1..max_documents of them (empty
//     texts allowed). TEI's `texts` instead selects TEI's bare-array response.
//   top_n: absent, null or 0 = all; larger than the count = all; negative → 400.
//   return_documents (TEI: return_text): echo each document's text (default false).
//   instruction (SGLang: instruct): the <Instruct> line; default kDefaultRerankInstruction.
//   max_tokens_per_doc (Cohere): a cap on each document's tokens, below the context's.
//   raw_scores (TEI): yes_logit - no_logit instead of the probability.
// vLLM /v1/score: text_1 (the query) and text_2 (a string or an array: the documents); the
// response lists the scores in request order.
//
// The prompt: kRerankPrefix (its special tokens as control tokens), then the body
// "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}" tokenized as literal
// text (a document holding "<|im_end|>" stays text), then kRerankSuffix. Only the document is
// truncated, from its end, to fit the context (the reference's right truncation of the body).
#pragma once

#include <rapidjson/document.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ds {
class Tokenizer;
}  // namespace ds

namespace ds::openai {

// Cohere's documented recommendation; Open WebUI and Dify send far fewer.
inline constexpr size_t kMaxRerankDocuments = 1000;
// The Qwen3-Reranker model card's default task.
inline constexpr const char* kDefaultRerankInstruction =
    "Given a web search query, retrieve relevant passages that answer the query";
inline constexpr const char* kRerankPrefix =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
inline constexpr const char* kRerankSuffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

// Which response shape the request asked for.
enum class RerankApi {
  kRerank,  // {"id","model","object":"list","results":[...],"usage"} sorted by score
  kTei,     // TEI: a bare array [{"index","score","text"?}] sorted by score
  kScore,   // vLLM /v1/score: {"id","object":"list","model","data":[{"index","object":"score","score"}],"usage"}
};

struct RerankParams {
  RerankApi api = RerankApi::kRerank;
  std::string model;  // empty when not given
  std::string query;
  std::vector<std::string> documents;  // request order
  std::string instruction = kDefaultRerankInstruction;
  size_t top_n = 0;  // 0: all
  bool return_documents = false;
  bool raw_scores = false;
  std::optional<size_t> max_tokens_per_doc;
};

// The rerank bodies (documents or TEI's texts). ApiError(400) naming the field.
RerankParams parse_rerank_params(const rapidjson::Value& req, size_t max_documents = kMaxRerankDocuments);
// vLLM's /v1/score body (text_1, text_2). ApiError(400) naming the field.
RerankParams parse_score_params(const rapidjson::Value& req, size_t max_documents = kMaxRerankDocuments);

// The fixed tokens around every pair, tokenized once per model.
struct RerankTemplate {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};
// Throws std::runtime_error when the vocabulary lacks <|im_start|> / <|im_end|> as control
// tokens (the prompt would then be plain text, and scores meaningless).
RerankTemplate make_rerank_template(const Tokenizer& tok);

struct RerankPrompt {
  std::vector<int32_t> ids;
  bool truncated = false;  // the document lost tokens to fit
};

struct RerankBatch {
  std::vector<RerankPrompt> prompts;  // one per document, request order
  // Leading tokens every prompt shares (prefix + instruction + query): the KV an engine may
  // compute once per request.
  size_t shared_prefix = 0;
  size_t total_tokens = 0;  // usage.prompt_tokens
};

// Builds every pair's prompt within `context` tokens. A query (with its instruction) that
// leaves no room for a document → 400 naming `query`.
RerankBatch build_rerank_prompts(const RerankParams& p, const Tokenizer& tok, const RerankTemplate& t, size_t context);

// P(yes) = softmax([yes, no])[0] = sigmoid(yes - no), from the two head outputs at the last
// position; `raw`: yes - no itself (TEI's raw_scores).
double rerank_score(float yes_logit, float no_logit, bool raw = false);

struct RankedDocument {
  size_t index = 0;  // position in the request
  double score = 0.0;
};
// Sorted by score descending (ties: lower index first; NaN last), cut to top_n (0: all).
std::vector<RankedDocument> rank_documents(const std::vector<double>& scores, size_t top_n);

// The response for p.api; `scores` in request order (one per document). Rerank results carry
// "document": {"text"} with return_documents and "truncated": true for a shortened document.
std::string rerank_response_json(const RerankParams& p, const RerankBatch& batch, const std::vector<double>& scores,
                                 const std::string& id, const std::string& model);

}  // namespace ds::openai
