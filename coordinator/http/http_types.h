// Socket-free view of HTTP for the request layer: the Beast server turns wire requests into
// HttpRequest and implements ResponseChannel; handlers (the OpenAI service, tests) never see
// Beast, so they are unit-testable without a network.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ds {

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string path;                                          // target without the query string
  std::string query;                                         // after '?', may be empty
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;

  // First header with this (lower-case) name, or empty.
  std::string_view header(std::string_view lower_name) const {
    for (const auto& [k, v] : headers) {
      if (k == lower_name) return v;
    }
    return {};
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// Where a handler sends its reply. Thread-safe: may be called from any thread (e.g. an
// engine callback). Exactly one of respond() or begin_stream()..end_stream() per request;
// calls after the client went away are silently dropped.
class ResponseChannel {
 public:
  virtual ~ResponseChannel() = default;
  virtual void respond(HttpResponse response) = 0;
  // Starts a chunked response (SSE: content type text/event-stream).
  virtual void begin_stream(int status, std::string content_type) = 0;
  virtual void stream_data(std::string bytes) = 0;  // one chunk of body
  virtual void end_stream() = 0;
};

// Called by the server when the client disconnects before the reply is complete.
using DisconnectHook = std::function<void()>;

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Must complete `channel` eventually (or the client waits until it gives up). Returns what
  // to run if the client goes away first (may be empty).
  virtual DisconnectHook handle(HttpRequest request, std::shared_ptr<ResponseChannel> channel) = 0;
};

}  // namespace ds
