#include "coordinator/http/router.h"

#include <atomic>
#include <exception>

#include "coordinator/http/api_error.h"
#include "coordinator/http/auth.h"
#include "coordinator/http/framing.h"

namespace ds {

namespace {

// Records each reply's status once, and remembers whether the handler replied, so a handler
// that throws after starting a reply does not get a second one.
class TrackingChannel : public ResponseChannel {
 public:
  TrackingChannel(std::shared_ptr<ResponseChannel> inner, ServerMetrics* metrics)
      : inner_(std::move(inner)), metrics_(metrics) {}

  void respond(HttpResponse response) override {
    if (claim(response.status)) inner_->respond(std::move(response));
  }
  void begin_stream(int status, std::string content_type) override {
    if (claim(status)) inner_->begin_stream(status, std::move(content_type));
  }
  void stream_data(std::string bytes) override { inner_->stream_data(std::move(bytes)); }
  void end_stream() override { inner_->end_stream(); }

  bool replied() const { return replied_.load(); }

 private:
  bool claim(int status) {
    if (replied_.exchange(true)) return false;
    if (metrics_ != nullptr) metrics_->record_status(status);
    return true;
  }

  std::shared_ptr<ResponseChannel> inner_;
  ServerMetrics* metrics_;
  std::atomic<bool> replied_{false};
};

}  // namespace

Router::Router(std::string api_key, ServerMetrics* metrics) : api_key_(std::move(api_key)), metrics_(metrics) {}

void Router::add(std::string method, std::string path, RouteHandler handler, bool is_public) {
  routes_.push_back({std::move(method), std::move(path), std::move(handler), is_public});
}

RouteHandler Router::find(const std::string& method, const std::string& path) const {
  for (const Route& r : routes_) {
    if (r.method == method && r.path == path) return r.handler;
  }
  return {};
}

DisconnectHook Router::handle(HttpRequest request, std::shared_ptr<ResponseChannel> channel) {
  auto tracked = std::make_shared<TrackingChannel>(std::move(channel), metrics_);
  const Route* match = nullptr;
  std::string allowed;
  for (const Route& r : routes_) {
    if (r.path != request.path) continue;
    if (r.method == request.method) match = &r;
    allowed += allowed.empty() ? r.method : ", " + r.method;
  }
  if (match == nullptr) {
    if (allowed.empty()) {
      tracked->respond(
          error_response(404, "Route " + request.method + " " + request.path + " not found", {}, "not_found"));
    } else {
      HttpResponse r = error_response(405, "Method " + request.method + " not allowed for " + request.path, {},
                                      "method_not_allowed");
      r.headers.emplace_back("Allow", allowed);
      tracked->respond(std::move(r));
    }
    return {};
  }
  if (!match->is_public && !bearer_authorized(request.header("authorization"), api_key_)) {
    HttpResponse r =
        error_response(401, "Invalid or missing API key (Authorization: Bearer ...)", {}, "invalid_api_key");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    tracked->respond(std::move(r));
    return {};
  }
  if (request.method == "POST" && !http_rules::is_json_media_type(request.header("content-type"))) {
    const std::string_view got = request.header("content-type");
    HttpResponse r = error_response(415,
                                    "Content-Type must be application/json (got " +
                                        (got.empty() ? std::string("none") : "'" + std::string(got) + "'") + ")",
                                    {}, "unsupported_media_type");
    r.headers.emplace_back("Accept", "application/json");
    tracked->respond(std::move(r));
    return {};
  }
  try {
    return match->handler(request, tracked);
  } catch (const ApiError& e) {
    if (!tracked->replied()) tracked->respond(error_response(e));
  } catch (const std::exception& e) {
    if (!tracked->replied()) tracked->respond(error_response(500, std::string("Internal error: ") + e.what()));
  } catch (...) {
    if (!tracked->replied()) tracked->respond(error_response(500, "Internal error"));
  }
  return {};
}

}  // namespace ds
