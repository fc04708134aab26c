// GenerationSink that turns one request's engine events into its HTTP reply: SSE chunks as
// tokens arrive (stream) or one JSON body at the end. Also feeds per-request metrics
// (time to first token, inter-token latency, token counters, finish reasons).
//
// Engine callbacks arrive on the engine's thread; every callback is short (decode one token,
// build one small JSON) and never throws back into the engine.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/http/http_types.h"
#include "coordinator/http/metrics.h"
#include "coordinator/openai/output_stream.h"
#include "coordinator/openai/response_json.h"
#include "coordinator/serving/generation.h"

namespace ds::openai {

struct ResponderConfig {
  bool chat = true;  // chat.completion vs text_completion shapes
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  ResponseMeta meta;
  uint32_t prompt_tokens = 0;
  bool counts_prompt_tokens = true;  // false for choices after the first: the prompt is counted once
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  // Completions' echo with logprobs: the prompt's first token (it has no logprob); the others
  // arrive through on_prompt_logprobs.
  int32_t first_prompt_token = -1;
  bool echo_only = false;  // max_tokens 0 with echo: the engine's one token is dropped (finish "length")
};

class Responder : public GenerationSink {
 public:
  // `stop_engine` is called (at most once) when a stop string ends the request early; it
  // must not call back into this sink synchronously (the service defers it to a thread).
  Responder(ResponderConfig config, const Tokenizer& tokenizer, OutputStream output,
            std::shared_ptr<ResponseChannel> channel, ServerMetrics* metrics, std::function<void()> stop_engine);

  void on_started(uint32_t prompt_tokens) override;
  void on_token(const GeneratedToken& token) override;
  void on_finished(FinishReason reason, const std::string& error) override;
  void on_cached(uint32_t cached_tokens) override;
  void on_speculation(const SpecCounts& counts) override;
  void on_prompt_logprobs(const std::vector<GeneratedToken>& tokens) override;

  // The client disconnected: build nothing more.
  void abandon();

 private:
  void handle_token(const GeneratedToken& token);
  void start_stream();
  void send_event(const std::string& json);
  void emit(const ParseDelta& delta, const std::string& finish_reason, bool force);
  void complete(FinishReason reason, const std::string& error);
  void fail(int status, const std::string& message);
  std::string finish_reason_for(FinishReason reason) const;
  LogprobsView pending_logprobs() const;

  ResponderConfig config_;
  const Tokenizer* tokenizer_;
  OutputStream output_;
  std::shared_ptr<ResponseChannel> channel_;
  ServerMetrics* metrics_;
  std::function<void()> stop_engine_;

  std::mutex mu_;
  bool done_ = false;
  bool stream_started_ = false;
  bool role_sent_ = false;
  uint32_t completion_tokens_ = 0;
  uint32_t cached_tokens_ = 0;
  std::optional<SpecCounts> speculative_;  // set by engines that speculate
  std::vector<GeneratedToken> logprobs_;   // stream: not yet sent; otherwise: all
  size_t text_sent_ = 0;                   // completions: bytes of text emitted (text_offset)
  std::chrono::steady_clock::time_point last_token_;
};

}  // namespace ds::openai
