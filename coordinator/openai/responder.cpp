#include "coordinator/openai/responder.h"

#include <limits>

#include "coordinator/http/api_error.h"
#include "coordinator/http/sse.h"

namespace ds::openai {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Responder::Responder(ResponderConfig config, const Tokenizer& tokenizer, OutputStream output,
                     std::shared_ptr<ResponseChannel> channel, ServerMetrics* metrics,
                     std::function<void()> stop_engine)
    : config_(std::move(config)),
      tokenizer_(&tokenizer),
      output_(std::move(output)),
      channel_(std::move(channel)),
      metrics_(metrics),
      stop_engine_(std::move(stop_engine)) {}

void Responder::on_started(uint32_t prompt_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  // Abandoned responders touch nothing: the server (and its metrics) may already be gone.
  if (done_) return;
  if (metrics_ != nullptr && config_.counts_prompt_tokens) metrics_->add_prompt_tokens(prompt_tokens);
  try {
    if (config_.stream) start_stream();
  } catch (const std::exception& e) {
    fail(500, e.what());
  }
}

void Responder::on_cached(uint32_t cached_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  cached_tokens_ = cached_tokens;
}

void Responder::on_speculation(const SpecCounts& counts) {
  std::lock_guard<std::mutex> lock(mu_);
  speculative_ = counts;
}

// Before any generated token: the prompt's entries lead the logprobs (the first one's logprob
// is NaN, written as null).
void Responder::on_prompt_logprobs(const std::vector<GeneratedToken>& tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ || !config_.logprobs || config_.first_prompt_token < 0) return;
  std::vector<GeneratedToken> entries;
  entries.reserve(tokens.size() + 1 + logprobs_.size());
  entries.push_back({config_.first_prompt_token, std::numeric_limits<float>::quiet_NaN(), {}});
  entries.insert(entries.end(), tokens.begin(), tokens.end());
  entries.insert(entries.end(), logprobs_.begin(), logprobs_.end());
  logprobs_ = std::move(entries);
}

void Responder::on_token(const GeneratedToken& token) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  try {
    handle_token(token);
  } catch (const std::exception& e) {
    // Never let a bad token take the engine thread down; this request ends, others go on.
    fail(500, std::string("Output processing failed: ") + e.what());
    if (stop_engine_) stop_engine_();
  }
}

void Responder::handle_token(const GeneratedToken& token) {
  if (config_.echo_only) return;  // max_tokens 0: nothing generated is reported
  const auto now = std::chrono::steady_clock::now();
  if (metrics_ != nullptr) {
    metrics_->add_generation_tokens(1);
    if (completion_tokens_ == 0) {
      metrics_->observe_time_to_first_token(seconds_between(config_.arrival, now));
    } else {
      metrics_->observe_inter_token_latency(seconds_between(last_token_, now));
    }
  }
  last_token_ = now;
  ++completion_tokens_;
  if (config_.logprobs) logprobs_.push_back(token);
  const ParseDelta delta = output_.add_token(token.token);
  if (config_.stream) {
    start_stream();
    emit(delta, "", /*force=*/false);
  }
  if (output_.stopped()) {
    complete(FinishReason::kStop, "");
    if (stop_engine_) stop_engine_();
  }
}

void Responder::on_finished(FinishReason reason, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  try {
    complete(reason, error);
  } catch (const std::exception& e) {
    fail(500, e.what());
  }
}

void Responder::abandon() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_ && metrics_ != nullptr) metrics_->record_finished("abort");
  done_ = true;
}

void Responder::start_stream() {
  if (stream_started_) return;
  stream_started_ = true;
  channel_->begin_stream(200, std::string(kSseContentType));
  emit(ParseDelta{}, "", /*force=*/true);  // the role announcement (chat) / nothing (completions)
}

void Responder::send_event(const std::string& json) {
  channel_->stream_data(sse_event(json));
}

LogprobsView Responder::pending_logprobs() const {
  LogprobsView v;
  if (config_.logprobs) {
    v.tokenizer = tokenizer_;
    v.tokens = &logprobs_;
    v.text_offset = text_sent_;
  }
  return v;
}

// Sends one chunk for `delta` (and the logprobs of the tokens behind it). Skipped when there
// is nothing to say, unless `force` (role chunk) or a finish reason.
void Responder::emit(const ParseDelta& delta, const std::string& finish_reason, bool force) {
  if (config_.chat) {
    const bool first = !role_sent_;
    if (delta.empty() && finish_reason.empty() && !(force && first)) return;
    // Logprobs ride on content chunks, not on the bare role announcement.
    const bool with_lp = !(force && first && delta.empty());
    const LogprobsView lp = with_lp ? pending_logprobs() : LogprobsView{};
    send_event(chat_chunk_json(config_.meta, delta, first, lp, finish_reason));
    role_sent_ = true;
    if (with_lp) logprobs_.clear();
    return;
  }
  if (delta.content.empty() && finish_reason.empty()) return;
  send_event(completion_chunk_json(config_.meta, delta.content, pending_logprobs(), finish_reason));
  text_sent_ += delta.content.size();
  logprobs_.clear();
}

std::string Responder::finish_reason_for(FinishReason reason) const {
  if (reason == FinishReason::kLength || config_.echo_only) return "length";
  if (config_.chat && !output_.result().tool_calls.empty()) return "tool_calls";
  return "stop";
}

void Responder::complete(FinishReason reason, const std::string& error) {
  if (reason == FinishReason::kError) return fail(500, error.empty() ? "Generation failed" : error);
  if (reason == FinishReason::kCancelled) return fail(503, "The request was cancelled by the server");
  done_ = true;
  const ParseDelta tail = output_.finish();
  const std::string finish = finish_reason_for(reason);
  const Usage usage{config_.prompt_tokens, completion_tokens_, cached_tokens_, speculative_};
  if (metrics_ != nullptr) {
    metrics_->record_finished(finish);
    metrics_->observe_e2e_latency(seconds_between(config_.arrival, std::chrono::steady_clock::now()));
  }
  if (!config_.stream) {
    HttpResponse r;
    const LogprobsView lp = pending_logprobs();
    r.body = config_.chat ? chat_completion_json(config_.meta, output_.result(), finish, lp, usage)
                          : completion_json(config_.meta, output_.result().content, finish, lp, usage);
    channel_->respond(std::move(r));
    return;
  }
  start_stream();
  emit(tail, "", /*force=*/false);
  // The finish chunk carries an empty delta, as OpenAI's does.
  emit(ParseDelta{}, finish, /*force=*/false);
  if (config_.include_usage) {
    send_event(usage_chunk_json(config_.meta, config_.chat ? "chat.completion.chunk" : "text_completion", usage));
  }
  channel_->stream_data(sse_done());
  channel_->end_stream();
}

void Responder::fail(int status, const std::string& message) {
  done_ = true;
  if (metrics_ != nullptr) metrics_->record_finished(status == 503 ? "abort" : "error");
  const ApiError err(status, message);
  if (!stream_started_) {
    channel_->respond(error_response(err));
    return;
  }
  // Headers (200) are already out: report the error in-band, then end the stream.
  send_event(error_json(err.what(), err.type(), err.param(), err.code()));
  channel_->stream_data(sse_done());
  channel_->end_stream();
}

}  // namespace ds::openai
