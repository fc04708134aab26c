// A scripted Engine for request-layer tests: every request emits the same token script on its
// own thread (optionally slowly), then finishes the way the script says. Records submissions
// and cancels so tests can assert on them.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/serving/generation.h"

namespace ds::test {

struct FakeScript {
  std::vector<int32_t> tokens;
  FinishReason end = FinishReason::kStop;  // after the last token (unless max_tokens ran out)
  std::string error;                       // for kError
  std::chrono::milliseconds delay{0};      // before each token
  std::vector<int32_t> stop_ids;           // finish with kStop right after emitting one of these
  bool reject = false;                     // submit throws std::invalid_argument
};

class FakeEngine : public Engine {
 public:
  ~FakeEngine() override { join(); }

  void set_script(FakeScript s) {
    std::lock_guard<std::mutex> lock(mu_);
    script_ = std::move(s);
  }
  void set_health(EngineHealth h) {
    std::lock_guard<std::mutex> lock(mu_);
    health_ = h;
  }

  // While held, submit() blocks: the requests it holds stand for ones the engine has not taken
  // yet (they are not in health().queue_depth), so tests can keep the request threads busy.
  void hold_submits(bool hold) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = hold;
    cv_.notify_all();
  }
  // Waits until `n` submits are blocked by hold_submits (false on timeout).
  bool wait_held(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return held_ >= n; });
  }

  void submit(GenerationRequest request, std::shared_ptr<GenerationSink> sink) override {
    FakeScript script;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (hold_) {
        ++held_;
        cv_.notify_all();
        cv_.wait(lock, [this] { return !hold_; });
        --held_;
      }
      script = script_;
      if (script.reject) throw std::invalid_argument("fake engine rejects this request");
      submitted_.push_back(request);
      threads_.emplace_back(
          [this, request = std::move(request), sink = std::move(sink), script] { run(request, *sink, script); });
    }
  }

  void cancel(const std::string& request_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.insert(request_id);
    cv_.notify_all();
  }

  EngineHealth health() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return health_;
  }

  std::vector<GenerationRequest> submitted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  bool was_cancelled(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_.count(id) > 0;
  }
  // Waits until some request was cancelled (true) or the timeout passed (false).
  bool wait_for_cancel(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return !cancelled_.empty(); });
  }
  size_t finished_count() const { return finished_.load(); }

  void join() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

 private:
  bool is_cancelled(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_.count(id) > 0;
  }

  void run(const GenerationRequest& request, GenerationSink& sink, const FakeScript& script) {
    sink.on_started(static_cast<uint32_t>(request.prompt_ids.size()));
    FinishReason end = script.end;
    uint32_t emitted = 0;
    bool hit_stop = false;
    for (const int32_t token : script.tokens) {
      if (script.delay.count() > 0) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, script.delay, [&] { return cancelled_.count(request.request_id) > 0; });
      }
      if (is_cancelled(request.request_id)) {
        end = FinishReason::kCancelled;
        break;
      }
      if (emitted == request.sampling.max_tokens) {
        end = FinishReason::kLength;
        break;
      }
      GeneratedToken g;
      g.token = token;
      g.logprob = -0.25f;
      for (uint32_t k = 0; k < request.sampling.top_logprobs; ++k)
        g.top_logprobs.push_back({token + static_cast<int32_t>(k), -0.25f - static_cast<float>(k)});
      sink.on_token(g);
      ++emitted;
      if (std::find(script.stop_ids.begin(), script.stop_ids.end(), token) != script.stop_ids.end()) {
        end = FinishReason::kStop;
        hit_stop = true;
        break;
      }
    }
    // Like a real engine: the budget running out on the last token is "length".
    if (end == FinishReason::kStop && !hit_stop && emitted == request.sampling.max_tokens) end = FinishReason::kLength;
    sink.on_finished(end, end == FinishReason::kError ? script.error : std::string());
    ++finished_;
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  FakeScript script_;
  bool hold_ = false;
  size_t held_ = 0;
  EngineHealth health_{true, 1, 1, 0, 0, 0, 4096};
  std::vector<GenerationRequest> submitted_;
  std::set<std::string> cancelled_;
  std::vector<std::thread> threads_;
  std::atomic<size_t> finished_{0};
};

}  // namespace ds::test
