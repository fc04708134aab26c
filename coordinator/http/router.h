// Routes requests by (method, path) to handlers, with the cross-cutting rules in one place:
// 404 / 405 JSON errors, API-key check (except public routes such as /health), POST bodies
// only as application/json (415: no cross-origin "simple request" reaches a handler), per-status
// metrics, and a last-resort catch so a throwing handler becomes a 500, never a crash.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/http/http_types.h"
#include "coordinator/http/metrics.h"

namespace ds {

using RouteHandler = std::function<DisconnectHook(HttpRequest&, std::shared_ptr<ResponseChannel>)>;

class Router : public RequestHandler {
 public:
  // `metrics` may be null. Empty `api_key`: no authentication.
  Router(std::string api_key, ServerMetrics* metrics);

  // `is_public`: reachable without the API key (liveness probes).
  void add(std::string method, std::string path, RouteHandler handler, bool is_public = false);

  DisconnectHook handle(HttpRequest request, std::shared_ptr<ResponseChannel> channel) override;

  // The handler of (method, path), without the cross-cutting rules (another router that already
  // applied them hands a request on: an in-process peer model's routes); empty when none.
  RouteHandler find(const std::string& method, const std::string& path) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    RouteHandler handler;
    bool is_public = false;
  };

  std::string api_key_;
  ServerMetrics* metrics_;
  std::vector<Route> routes_;
};

}  // namespace ds
