// A ResponseChannel that records the reply in memory, for tests of the service layer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/http/http_types.h"

namespace ds::test {

class RecordingChannel : public ResponseChannel {
 public:
  void respond(HttpResponse response) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = response.status;
    content_type_ = response.content_type;
    body_ = std::move(response.body);
    headers_ = std::move(response.headers);
    done_ = true;
    cv_.notify_all();
  }
  void begin_stream(int status, std::string content_type) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    content_type_ = std::move(content_type);
    streamed_ = true;
  }
  void stream_data(std::string bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    body_ += bytes;
  }
  void end_stream() override {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

  bool wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return done_; });
  }
  int status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  bool done() const {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  std::string body() const {
    std::lock_guard<std::mutex> lock(mu_);
    return body_;
  }
  std::string content_type() const {
    std::lock_guard<std::mutex> lock(mu_);
    return content_type_;
  }
  bool streamed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return streamed_;
  }
  std::string header(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, v] : headers_) {
      if (k == name) return v;
    }
    return {};
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int status_ = 0;
  std::string content_type_;
  std::string body_;
  std::vector<std::pair<std::string, std::string>> headers_;
  bool streamed_ = false;
  bool done_ = false;
};

// The payloads of `data:` SSE events in `body`, in order.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

}  // namespace ds::test
