#include "coordinator/openai/submission.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <utility>

#include "common/log.h"
#include "coordinator/http/api_error.h"
#include "coordinator/openai/choice_fan_in.h"
#include "coordinator/openai/output_stream.h"

namespace ds::openai {

namespace {

// Forwards to the responder and logs the request's end (status, tokens, duration) with its id.
class LoggedSink : public GenerationSink {
 public:
  // `started` (optional) runs once, when the request started (or ended without starting);
  // `keep_prompt_logprobs` (optional) gets a copy of the prompt logprobs first.
  LoggedSink(std::shared_ptr<GenerationSink> inner, std::string id, size_t prompt_tokens,
             std::function<void()> started = {},
             std::shared_ptr<std::vector<GeneratedToken>> keep_prompt_logprobs = nullptr)
      : inner_(std::move(inner)),
        id_(std::move(id)),
        prompt_tokens_(prompt_tokens),
        started_(std::move(started)),
        keep_prompt_logprobs_(std::move(keep_prompt_logprobs)) {}
  void on_prompt_logprobs(const std::vector<GeneratedToken>& tokens) override {
    if (keep_prompt_logprobs_) *keep_prompt_logprobs_ = tokens;  // engine thread, before `started` runs
    inner_->on_prompt_logprobs(tokens);
  }
  void on_started(uint32_t prompt_tokens) override {
    inner_->on_started(prompt_tokens);
    run_started();
  }
  void on_token(const GeneratedToken& token) override {
    ++tokens_;
    inner_->on_token(token);
  }
  void on_cached(uint32_t cached_tokens) override { inner_->on_cached(cached_tokens); }
  void on_speculation(const SpecCounts& counts) override { inner_->on_speculation(counts); }
  void on_finished(FinishReason reason, const std::string& error) override {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_);
    ds::log::info("http",
                  ds::log::Msg() << "request finished: " << finish_reason_name(reason) << ", " << prompt_tokens_
                                 << " prompt + " << tokens_ << " completion tokens in " << ms.count() << " ms"
                                 << (error.empty() ? "" : " (" + error + ")"),
                  id_);
    inner_->on_finished(reason, error);
    run_started();
  }

 private:
  void run_started() {
    if (started_) std::exchange(started_, {})();  // engine thread only: no race
  }
  std::shared_ptr<GenerationSink> inner_;
  std::string id_;
  size_t prompt_tokens_;
  std::atomic<uint64_t> tokens_{0};
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::function<void()> started_;
  std::shared_ptr<std::vector<GeneratedToken>> keep_prompt_logprobs_;
};

// What a choice shares with choice 0: choice 0 keeps its prompt logprobs in `keep`; a later
// choice is handed them (`given`) instead of computing its prompt again.
struct SharedPrompt {
  std::shared_ptr<std::vector<GeneratedToken>> keep;
  const std::vector<GeneratedToken>* given = nullptr;
};

// One engine request with its responder; `started` as LoggedSink's.
DisconnectHook submit_one(Engine& engine, const std::shared_ptr<TaskThread>& deferred, const Tokenizer& tokenizer,
                          ServerMetrics& metrics, Submission s, std::shared_ptr<ResponseChannel> channel,
                          std::function<void()> started = {}, const SharedPrompt& shared = {}) {
  const std::string id = s.request.request_id;
  const uint32_t min_tokens = s.request.sampling.min_tokens;
  OutputStream output(tokenizer, std::move(s.stop), std::move(s.parser), std::move(s.echo), min_tokens);
  auto stop_engine = [&engine, weak = std::weak_ptr<TaskThread>(deferred), id] {
    if (auto d = weak.lock()) d->post([&engine, id] { engine.cancel(id); });
  };
  auto responder = std::make_shared<Responder>(std::move(s.config), tokenizer, std::move(output), std::move(channel),
                                               &metrics, std::move(stop_engine));
  if (shared.given != nullptr) responder->on_prompt_logprobs(*shared.given);
  try {
    const size_t prompt_tokens = s.request.prompt_ids.size();
    engine.submit(std::move(s.request),
                  std::make_shared<LoggedSink>(responder, id, prompt_tokens, std::move(started), shared.keep));
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, e.what());
  } catch (const std::exception& e) {
    throw ApiError(503, std::string("The engine cannot take the request: ") + e.what());
  }
  return [&engine, responder, id] {
    responder->abandon();
    engine.cancel(id);
  };
}

// The choices after the first: their own request ids and seeds, counted once in the metrics.
std::vector<Submission> other_choices(const Submission& s) {
  std::vector<Submission> out;
  for (uint32_t i = 1; i < s.n; ++i) {
    Submission c = s;
    c.n = 1;
    c.request.request_id = s.request.request_id + "-" + std::to_string(i);
    if (s.request.sampling.seed) c.request.sampling.seed = choice_seed(*s.request.sampling.seed, i);
    c.config.meta.choice_index = i;
    c.config.counts_prompt_tokens = false;
    c.request.sampling.prompt_logprobs = false;  // choice 0's are handed over (SharedPrompt)
    out.push_back(std::move(c));
  }
  return out;
}

// What the choices of one request share: the cancel hooks of those submitted so far.
struct ChoiceGroup {
  std::mutex mu;
  bool cancelled = false;
  std::vector<DisconnectHook> hooks;
  void add(DisconnectHook h) {
    std::lock_guard<std::mutex> lock(mu);
    if (cancelled) {
      h();  // the client left meanwhile
    } else {
      hooks.push_back(std::move(h));
    }
  }
  void cancel_all() {
    std::vector<DisconnectHook> hs;
    {
      std::lock_guard<std::mutex> lock(mu);
      cancelled = true;
      hs.swap(hooks);
    }
    for (auto& h : hs) h();
  }
};

}  // namespace

uint64_t choice_seed(uint64_t seed, uint32_t index) {
  if (index == 0) return seed;
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * index;  // splitmix64 of (seed, index)
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

DisconnectHook submit(Engine& engine, const std::shared_ptr<TaskThread>& deferred, const Tokenizer& tokenizer,
                      ServerMetrics& metrics, Submission s, std::shared_ptr<ResponseChannel> channel) {
  if (s.n <= 1) return submit_one(engine, deferred, tokenizer, metrics, std::move(s), std::move(channel));
  auto group = std::make_shared<ChoiceGroup>();
  const std::weak_ptr<TaskThread> weak_deferred = deferred;
  auto fan = std::make_shared<ChoiceFanIn>(std::move(channel), s.n, s.config.stream, [group, weak_deferred] {
    if (auto d = weak_deferred.lock()) d->post([group] { group->cancel_all(); });
  });
  s.config.meta.choice_index = 0;
  auto rest = std::make_shared<std::vector<Submission>>(other_choices(s));
  SharedPrompt first;
  if (s.request.sampling.prompt_logprobs) first.keep = std::make_shared<std::vector<GeneratedToken>>();
  // Runs on the engine thread when choice 0 started: the others are submitted from the task
  // thread (never from inside an engine callback).
  auto submit_rest = [&engine, &tokenizer, &metrics, weak_deferred, group, fan, rest, kept = first.keep] {
    auto d = weak_deferred.lock();
    if (!d) return;
    d->post([&engine, &tokenizer, &metrics, d, group, fan, rest, kept] {
      for (Submission& c : *rest) {
        const uint32_t index = c.config.meta.choice_index;
        if (fan->failed()) return;
        try {
          group->add(submit_one(engine, d, tokenizer, metrics, std::move(c), fan->channel(index), {},
                                SharedPrompt{nullptr, kept.get()}));
        } catch (const ApiError& e) {
          fan->channel(index)->respond(error_response(e));
        }
      }
    });
  };
  group->add(
      submit_one(engine, deferred, tokenizer, metrics, std::move(s), fan->channel(0), std::move(submit_rest), first));
  return [group] { group->cancel_all(); };
}

}  // namespace ds::openai
