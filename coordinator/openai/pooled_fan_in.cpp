#include "coordinator/openai/pooled_fan_in.h"

#include <exception>
#include <utility>

#include "coordinator/http/api_error.h"

namespace ds::openai {

class PooledFanIn::InputSink : public GenerationSink {
 public:
  InputSink(std::shared_ptr<PooledFanIn> fan_in, size_t index) : fan_in_(std::move(fan_in)), index_(index) {}
  void on_started(uint32_t) override {}
  void on_token(const GeneratedToken&) override {}
  void on_pooled(const std::vector<float>& values) override { fan_in_->pooled(index_, values); }
  void on_finished(FinishReason reason, const std::string& error) override { fan_in_->finished(index_, reason, error); }

 private:
  std::shared_ptr<PooledFanIn> fan_in_;
  size_t index_;
};

PooledFanIn::PooledFanIn(std::shared_ptr<ResponseChannel> out, size_t n_inputs, Answer answer,
                         std::function<void()> cancel_others)
    : out_(std::move(out)),
      answer_(std::move(answer)),
      cancel_others_(std::move(cancel_others)),
      outputs_(n_inputs),
      done_(n_inputs, false) {}

std::shared_ptr<GenerationSink> PooledFanIn::sink(size_t index) {
  return std::make_shared<InputSink>(shared_from_this(), index);
}

bool PooledFanIn::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void PooledFanIn::fail(HttpResponse response) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_ || n_done_ == outputs_.size()) return;
    failed_ = true;
  }
  out_->respond(std::move(response));
}

void PooledFanIn::pooled(size_t index, const std::vector<float>& values) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index < outputs_.size()) outputs_[index] = values;
}

void PooledFanIn::finished(size_t index, FinishReason reason, const std::string& error) {
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_ || index >= done_.size() || done_[index]) return;
  if (reason != FinishReason::kStop || outputs_[index].empty()) {
    failed_ = true;
    lock.unlock();
    const bool cancelled = reason == FinishReason::kCancelled;
    const std::string why = error.empty() ? std::string(finish_reason_name(reason)) : error;
    out_->respond(
        error_response(cancelled ? 503 : 500, "input " + std::to_string(index) + " was not computed: " + why));
    if (cancel_others_) cancel_others_();
    return;
  }
  done_[index] = true;
  if (++n_done_ < outputs_.size()) return;
  lock.unlock();  // every output is in and nothing writes them any more
  HttpResponse reply;
  try {
    reply = answer_(outputs_);
  } catch (const ApiError& e) {
    reply = error_response(e);
  } catch (const std::exception& e) {
    reply = error_response(500, std::string("Internal error: ") + e.what());
  }
  out_->respond(std::move(reply));
}

}  // namespace ds::openai
