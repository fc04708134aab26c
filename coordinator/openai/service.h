// The OpenAI-compatible API as a socket-free service: parse → validate → render/tokenize →
// GenerationRequest → Engine, and engine events → response bodies (Responder). Its router()
// is the RequestHandler the Beast HttpServer calls; tests call it directly with a recording
// ResponseChannel and a fake Engine.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health
// (liveness, no API key), GET /ready, GET /metrics, POST /tokenize, POST /detokenize; with a
// pooling model POST /v1/embeddings, or POST /v1/rerank, /rerank, /v2/rerank and /v1/score; a
// chat server hands those to its peers (PeerModel), if it has them.
//
// tool_choice: "none" disables tool-call parsing; "auto" parses tool calls the model chooses
// to make; "required" and a named function constrain the output to a tool call
// (structured_request.h), as response_format / structured_outputs constrain it to a schema.
#pragma once

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/chat_template/chat_template.h"
#include "coordinator/http/http_types.h"
#include "coordinator/http/metrics.h"
#include "coordinator/http/router.h"
#include "coordinator/http/server_options.h"
#include "coordinator/openai/admission.h"
#include "coordinator/openai/pooled_fan_in.h"
#include "coordinator/openai/request.h"
#include "coordinator/openai/rerank_request.h"
#include "coordinator/openai/structured_request.h"
#include "coordinator/openai/task_thread.h"
#include "coordinator/output_parser/output_parser.h"
#include "coordinator/serving/generation.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds::openai {

class OpenAIService;

// Another model this server answers for: an embedding or reranker model hosted by this process
// (--embed-model: an OpenAIService of its own, with its own engine and workers) or an upstream
// server (--embed-upstream: UpstreamProxy::forward). The routes of its kind go to `handle`.
struct PeerModel {
  std::string kind;     // "embed" | "rerank"
  RouteHandler handle;  // takes the request as the router checked it (API key, media type)
  // A hosted peer (listed by /v1/models, part of /ready); null for an upstream, whose models
  // are the upstream's to list.
  const OpenAIService* hosted = nullptr;
};

class OpenAIService {
 public:
  // All references must outlive the service; the engine must not call a sink after it is
  // destroyed (stop or drain the engine first).
  OpenAIService(const ServerOptions& options, Engine& engine, const Tokenizer& tokenizer,
                const ChatTemplate& chat_template, ServerMetrics& metrics);
  ~OpenAIService();
  OpenAIService(const OpenAIService&) = delete;
  OpenAIService& operator=(const OpenAIService&) = delete;

  RequestHandler& handler() { return router_; }
  ServerMetrics& metrics() { return metrics_; }

  // Hands the routes of `peer.kind` to the peer (when this service serves another kind). Call
  // before serving (not thread-safe against requests).
  void add_peer(PeerModel peer);
  // Runs this service's handler of the request's route as a peer of another service, whose
  // router already applied the cross-cutting rules; 404 when it has none.
  DisconnectHook handle_as_peer(HttpRequest& request, std::shared_ptr<ResponseChannel> channel);

 private:
  using Channel = std::shared_ptr<ResponseChannel>;
  using Clock = std::chrono::steady_clock;
  using Work = std::function<DisconnectHook(const HttpRequest&, const Channel&, Clock::time_point arrival)>;

  void add_routes();
  // Runs on the I/O thread: admission (429 when full, if `admitted`), then `work` on a request
  // thread. Nothing proportional to the body's size runs on the I/O threads.
  DisconnectHook offload(HttpRequest& request, Channel channel, bool admitted, Work work);
  DisconnectHook chat_completions(const HttpRequest& request, Channel channel, Clock::time_point arrival);
  DisconnectHook completions(const HttpRequest& request, Channel channel, Clock::time_point arrival);
  void list_models(Channel channel);
  // This service's /v1/models entry (one object).
  void write_model_card(rapidjson::Writer<rapidjson::StringBuffer>& w) const;
  // The peer serving `kind`, or null.
  const PeerModel* peer(const std::string& kind) const;
  void ready(Channel channel);
  void prometheus(Channel channel);
  void tokenize(const HttpRequest& request, Channel channel);
  void detokenize(const HttpRequest& request, Channel channel);

  // Pooling models (pooling_routes.cpp): every input or document is an engine request of its
  // own (GenerationRequest::pooled), so the scheduler batches them by tokens, across requests.
  void add_pooling_routes();
  DisconnectHook embeddings(const HttpRequest& request, Channel channel);
  DisconnectHook rerank(const HttpRequest& request, Channel channel, bool score_api);
  DisconnectHook submit_pooled(const char* id_prefix, const std::vector<std::vector<int32_t>>& prompts, Channel channel,
                               PooledFanIn::Answer answer);
  // A route of another model kind than the one served: what to tell the client.
  [[noreturn]] void wrong_model_kind(const char* wanted) const;

  // Shared by both generation routes.
  void check_model(const std::string& model) const;
  // Converts, checks the user text against the context (before rendering: that is the costly
  // part of an oversized request), renders.
  // The request's image URLs, in order, go to `image_urls`.
  PromptText render_chat(const rapidjson::Value& request, std::vector<std::string>* image_urls) const;
  // The rendered chat's token ids with each image's pad expanded to its tokens (vision_input.h),
  // the images in `images`. 400s: images without --mmproj, the image limits, the context.
  std::vector<int32_t> encode_chat(const PromptText& prompt, const std::vector<std::string>& image_urls,
                                   std::vector<PromptImage>* images) const;
  uint32_t resolve_max_tokens(const CommonParams& params, size_t prompt_tokens, const char* prompt_param) const;
  // The most prompt tokens the context leaves room for (Tokenizer::kNoBudget when unknown).
  size_t prompt_budget() const;
  // Budgeted tokenization; a prompt over the budget is a 400 naming the context.
  std::vector<int32_t> encode_prompt(const PromptText& prompt, const char* prompt_param) const;
  std::vector<int32_t> encode_prompt(const std::string& text, size_t budget, const char* prompt_param) const;
  std::string new_request_id(const char* prefix);
  int64_t now_unix() const;
  // The common tail of both generation routes: builds the GenerationRequest (taking
  // params.sampling and params.stop) and hands it to the engine with a Responder.
  DisconnectHook generate(bool chat, const char* id_prefix, const char* prompt_param, std::vector<int32_t> prompt_ids,
                          CommonParams& params, std::optional<OutputParserOptions> parser, Channel channel,
                          std::chrono::steady_clock::time_point arrival, std::vector<PromptImage> images = {});

  // The request's output constraint for the engine (nullopt without one); `thinking` = the
  // prompt opened a reasoning block, which the constraint waits out.
  std::optional<OutputConstraint> output_constraint(const CommonParams& params, bool thinking);

  const ServerOptions& options_;
  Engine& engine_;
  const Tokenizer& tokenizer_;
  const ChatTemplate& chat_template_;
  ServerMetrics& metrics_;
  Router router_;
  std::atomic<uint64_t> next_id_{0};
  uint64_t id_salt_;
  AdmissionGate admission_;
  GrammarCache grammars_;
  std::once_flag vocab_once_;  // the tokenizer's vocabulary as byte strings, made on first use
  std::shared_ptr<const structured::TokenVocab> vocab_;
  std::optional<RerankTemplate> rerank_template_;  // model_kind "rerank"
  std::vector<PeerModel> peers_;
  // Engine cancels requested from engine callbacks. Shared (weakly) with in-flight responders
  // so a callback arriving after the service is gone does nothing.
  std::shared_ptr<TaskThread> deferred_ = std::make_shared<TaskThread>();
  // Parse, render, tokenize, submit (declared last: joined first, while the rest still exists).
  std::unique_ptr<TaskThread> request_threads_;
};

}  // namespace ds::openai
