// The pooling models' routes of OpenAIService: POST /v1/embeddings (an embedding model) and
// POST /v1/rerank, /rerank, /v2/rerank, /v1/score (a reranker). The request layer
// (embedding_request.h, rerank_request.h) parses and tokenizes; each input becomes one pooled
// engine request, and PooledFanIn answers once all are back.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/http/api_error.h"
#include "coordinator/openai/embedding_request.h"
#include "coordinator/openai/json_fields.h"
#include "coordinator/openai/rerank_request.h"
#include "coordinator/openai/service.h"

namespace ds::openai {

namespace {

HttpResponse json_reply(std::string body) {
  return HttpResponse{200, "application/json", std::move(body), {}};
}

// Prompts sharing at least this many leading tokens (a rerank request's template and query)
// run the first one alone before the others: its KV blocks are then in the prefix cache, and the
// others compute only what follows the shared prefix (no recurrent state in the pooling
// models, so any cached block boundary is a usable hit).
constexpr size_t kLeaderPrefix = 32;

size_t shared_prefix(const std::vector<std::vector<int32_t>>& prompts) {
  size_t n = prompts.empty() ? 0 : prompts[0].size();
  for (const std::vector<int32_t>& p : prompts) {
    size_t i = 0;
    while (i < n && i < p.size() && p[i] == prompts[0][i]) ++i;
    n = i;
  }
  return n;
}

// Forwards the leader's events, then (once) submits the followers.
class LeaderSink final : public GenerationSink {
 public:
  LeaderSink(std::shared_ptr<GenerationSink> inner, std::function<void()> then)
      : inner_(std::move(inner)), then_(std::move(then)) {}
  void on_started(uint32_t prompt_tokens) override { inner_->on_started(prompt_tokens); }
  void on_token(const GeneratedToken& token) override { inner_->on_token(token); }
  void on_cached(uint32_t cached_tokens) override { inner_->on_cached(cached_tokens); }
  void on_pooled(const std::vector<float>& values) override { inner_->on_pooled(values); }
  void on_finished(FinishReason reason, const std::string& error) override {
    inner_->on_finished(reason, error);
    if (then_) std::exchange(then_, nullptr)();
  }

 private:
  std::shared_ptr<GenerationSink> inner_;
  std::function<void()> then_;
};

}  // namespace

void OpenAIService::add_pooling_routes() {
  if (options_.model_kind == "rerank") rerank_template_ = make_rerank_template(tokenizer_);
  // A route of a kind this service does not serve goes to the peer of that kind, if any.
  const auto route = [this](const char* kind, auto work) {
    return [this, kind, work](HttpRequest& r, Channel c) {
      if (options_.model_kind != kind) {
        if (const PeerModel* p = peer(kind)) return p->handle(r, std::move(c));
      }
      return offload(r, std::move(c), true, work);
    };
  };
  router_.add("POST", "/v1/embeddings",
              route("embed", [this](const HttpRequest& req, const Channel& ch, Clock::time_point) {
                return embeddings(req, ch);
              }));
  for (const char* path : {"/v1/rerank", "/rerank", "/v2/rerank"}) {
    router_.add("POST", path, route("rerank", [this](const HttpRequest& req, const Channel& ch, Clock::time_point) {
                  return rerank(req, ch, false);
                }));
  }
  router_.add("POST", "/v1/score",
              route("rerank", [this](const HttpRequest& req, const Channel& ch, Clock::time_point) {
                return rerank(req, ch, true);
              }));
}

void OpenAIService::add_peer(PeerModel peer) {
  peers_.push_back(std::move(peer));
}

const PeerModel* OpenAIService::peer(const std::string& kind) const {
  for (const PeerModel& p : peers_) {
    if (p.kind == kind) return &p;
  }
  return nullptr;
}

DisconnectHook OpenAIService::handle_as_peer(HttpRequest& request, Channel channel) {
  const RouteHandler h = router_.find(request.method, request.path);
  if (!h) throw ApiError(404, "Route " + request.method + " " + request.path + " not found", {}, "not_found");
  return h(request, std::move(channel));
}

void OpenAIService::wrong_model_kind(const char* wanted) const {
  const std::string& kind = options_.model_kind;
  const std::string route = kind == "embed"    ? "/v1/embeddings"
                            : kind == "rerank" ? "/v1/rerank"
                                               : "/v1/chat/completions";
  throw ApiError(400,
                 "This server serves a " + std::string(kind == "embed" ? "embedding" : kind) + " model ('" +
                     options_.served_model_name + "'): it answers " + route + ", not " + wanted +
                     " requests (start one with deltaserve serve --mode " +
                     (std::string(wanted) == "chat" ? "chat" : wanted) +
                     ", or give the chat server --embed-upstream / --rerank-upstream)",
                 {}, "wrong_model_kind");
}

DisconnectHook OpenAIService::embeddings(const HttpRequest& request, Channel channel) {
  if (options_.model_kind != "embed") wrong_model_kind("embed");
  const rapidjson::Document doc = parse_body(request.body);
  EmbeddingModel model;
  model.n_vocab = tokenizer_.n_vocab();
  model.native_dim = options_.embedding_size;
  const uint32_t context = engine_.health().max_context;
  model.context = context > 1 ? context - 1 : 0;  // the engine keeps room for one position after a prompt
  const EmbeddingParams params = parse_embedding_params(doc, model);
  check_model(params.model);
  EmbeddingBatch batch = tokenize_embedding_inputs(params, tokenizer_, embedding_eos_id(tokenizer_, true), model);
  const std::string model_name = options_.served_model_name;
  const size_t tokens = batch.total_tokens;
  return submit_pooled("embd-", batch.ids, std::move(channel),
                       [params, model_name, tokens](std::vector<std::vector<float>>& outputs) {
                         for (std::vector<float>& v : outputs)
                           v = finish_embedding(v, params.dimensions, params.normalize);
                         return json_reply(embedding_response_json(model_name, outputs, params.encoding, tokens));
                       });
}

DisconnectHook OpenAIService::rerank(const HttpRequest& request, Channel channel, bool score_api) {
  if (options_.model_kind != "rerank") wrong_model_kind("rerank");
  const rapidjson::Document doc = parse_body(request.body);
  const RerankParams params = score_api ? parse_score_params(doc) : parse_rerank_params(doc);
  check_model(params.model);
  const uint32_t context = engine_.health().max_context;
  auto batch = std::make_shared<const RerankBatch>(
      build_rerank_prompts(params, tokenizer_, *rerank_template_, context > 1 ? context - 1 : 0));
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(batch->prompts.size());
  for (const RerankPrompt& p : batch->prompts) prompts.push_back(p.ids);
  const std::string id = new_request_id("rerank-");
  const std::string model_name = options_.served_model_name;
  return submit_pooled("rerank-", prompts, std::move(channel),
                       [params, batch, id, model_name](std::vector<std::vector<float>>& outputs) {
                         std::vector<double> scores;
                         scores.reserve(outputs.size());
                         for (const std::vector<float>& head : outputs) {
                           if (head.size() < 2) throw std::runtime_error("the reranker head returned one value");
                           scores.push_back(rerank_score(head[0], head[1], params.raw_scores));
                         }
                         return json_reply(rerank_response_json(params, *batch, scores, id, model_name));
                       });
}

// One pooled engine request per prompt; a client that leaves cancels those still running.
// Prompts with a long shared prefix go in two waves (kLeaderPrefix): the first, then the rest
// when it is done.
DisconnectHook OpenAIService::submit_pooled(const char* id_prefix, const std::vector<std::vector<int32_t>>& prompts,
                                            Channel channel, PooledFanIn::Answer answer) {
  const std::string base = new_request_id(id_prefix);
  auto ids = std::make_shared<std::vector<std::string>>();
  ids->reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) ids->push_back(base + "-" + std::to_string(i));
  Engine& engine = engine_;
  const auto cancel_all = [&engine, ids] {
    for (const std::string& id : *ids) engine.cancel(id);  // finished and unknown ones are ignored
  };
  auto fan_in = std::make_shared<PooledFanIn>(std::move(channel), prompts.size(), std::move(answer), cancel_all);
  // Submits prompts [first, last); false (the reply failed, the others cancelled) on a refusal.
  auto submit = [&engine, ids, fan_in, cancel_all](const std::vector<std::vector<int32_t>>& all, size_t first,
                                                   size_t last, std::shared_ptr<GenerationSink> lead) {
    for (size_t i = first; i < last && !fan_in->failed(); ++i) {
      GenerationRequest r;
      r.request_id = (*ids)[i];
      r.prompt_ids = all[i];
      r.pooled = true;
      try {
        engine.submit(std::move(r), i == first && lead ? lead : fan_in->sink(i));
      } catch (const std::invalid_argument& e) {
        fan_in->fail(error_response(ApiError(400, "input " + std::to_string(i) + ": " + e.what(), "input")));
        cancel_all();
        return false;
      } catch (const std::exception& e) {
        fan_in->fail(error_response(503, std::string("The engine refused the request: ") + e.what()));
        cancel_all();
        return false;
      }
    }
    return true;
  };
  if (prompts.size() < 2 || shared_prefix(prompts) < kLeaderPrefix) {
    if (!submit(prompts, 0, prompts.size(), nullptr)) return {};
    return cancel_all;
  }
  auto rest = std::make_shared<const std::vector<std::vector<int32_t>>>(prompts);
  auto leader = std::make_shared<LeaderSink>(fan_in->sink(0), [submit, rest, fan_in] {
    if (!fan_in->failed()) submit(*rest, 1, rest->size(), nullptr);
  });
  if (!submit(prompts, 0, 1, leader)) return {};
  return cancel_all;
}

}  // namespace ds::openai
