// The OpenAI-compatible API as a socket-free service: parse → validate → render/tokenize →
// GenerationRequest → Engine, and engine events → response bodies (Responder). Its router()
// is the RequestHandler the Beast HttpServer calls; tests call it directly with a recording
// ResponseChannel and a fake Engine.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health
// (liveness, no API key), GET /ready, GET /metrics, POST /tokenize, POST /detokenize.
//
// tool_choice: "none" disables tool-call parsing; "auto" parses tool calls the model chooses
// to make; "required" and a named function constrain the output to a tool call
// (structured_request.h), as response_format / structured_outputs constrain it to a schema.
#pragma once

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
#include "coordinator/openai/request.h"
#include "coordinator/openai/structured_request.h"
#include "coordinator/openai/task_thread.h"
#include "coordinator/output_parser/output_parser.h"
#include "coordinator/serving/generation.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds::openai {

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
  void ready(Channel channel);
  void prometheus(Channel channel);
  void tokenize(const HttpRequest& request, Channel channel);
  void detokenize(const HttpRequest& request, Channel channel);

  // Shared by both generation routes.
  void check_model(const std::string& model) const;
  // Converts, checks the user text against the context (before rendering: that is the costly
  // part of an oversized request), renders.
  PromptText render_chat(const rapidjson::Value& request) const;
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
                          std::chrono::steady_clock::time_point arrival);

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
  // Engine cancels requested from engine callbacks. Shared (weakly) with in-flight responders
  // so a callback arriving after the service is gone does nothing.
  std::shared_ptr<TaskThread> deferred_ = std::make_shared<TaskThread>();
  // Parse, render, tokenize, submit (declared last: joined first, while the rest still exists).
  std::unique_ptr<TaskThread> request_threads_;
};

}  // namespace ds::openai
