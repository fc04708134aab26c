// The HTTP/1.1 front door (Boost.Beast parser over Asio sockets): keep-alive, pipelining,
// chunked streaming, body/header limits, idle/read/write timeouts, graceful shutdown. It knows
// nothing about OpenAI: every request goes to a RequestHandler (normally a Router).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "coordinator/http/http_types.h"
#include "coordinator/http/metrics.h"
#include "coordinator/http/server_options.h"

namespace ds {

class HttpServer {
 public:
  // `handler` and `metrics` (may be null) must outlive the server.
  HttpServer(ServerOptions options, RequestHandler& handler, ServerMetrics* metrics);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the I/O threads. Throws std::runtime_error naming host:port
  // when the address cannot be bound.
  void start();
  uint16_t port() const;  // the bound port (useful with options.port == 0)

  // Graceful stop: no new connections; idle connections close; in-flight replies get
  // options.shutdown_grace to complete, then their requests are cancelled (their disconnect
  // hooks run) and the connections closed. Joins the I/O threads. Idempotent.
  void stop();

  // Blocks until SIGTERM or SIGINT arrives (or request_stop() is called), then stop().
  // `on_armed` runs once the signal handlers are installed (tests send signals after it).
  void run_until_signal(const std::function<void()>& on_armed = {});
  // Wakes run_until_signal() from another thread (thread-safe).
  void request_stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds
