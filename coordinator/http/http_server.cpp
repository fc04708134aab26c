#include "coordinator/http/http_server.h"

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "coordinator/http/http_session.h"

namespace ds {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using http_detail::HttpSession;

struct HttpServer::Impl {
  // Declared before the io_context: sessions still queued in it are destroyed with it and
  // touch these on the way out.
  ServerOptions options;
  std::atomic<int> live_sessions{0};
  http_detail::SessionContext ctx;
  uint16_t port = 0;

  std::mutex mu;  // guards sessions, started, stopped, stop_requested
  std::vector<std::weak_ptr<HttpSession>> sessions;
  bool started = false;
  bool stopped = false;
  bool stop_requested = false;
  std::condition_variable stop_cv;

  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{net::make_strand(ioc)};
  std::vector<std::thread> threads;

  ~Impl() { close_gate(); }

  void close_gate() {
    std::lock_guard<std::mutex> lock(ctx.gate->mu);
    ctx.gate->open = false;
  }

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](boost::system::error_code ec, tcp::socket s) {
      if (ec) {
        // operation_aborted: the acceptor was closed (stopping). Anything else (e.g. out of
        // file descriptors) is transient: keep accepting.
        if (ec != net::error::operation_aborted && acceptor.is_open()) accept();
        return;
      }
      boost::system::error_code ignored;
      s.set_option(tcp::no_delay(true), ignored);  // SSE tokens must not wait for Nagle
      auto session = std::make_shared<HttpSession>(std::move(s), ctx);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopped) return;  // raced with stop(): the socket closes with the session
        std::erase_if(sessions, [](const auto& w) { return w.expired(); });
        sessions.push_back(session);
      }
      session->start();
      accept();
    });
  }

  template <class F>
  void for_each_session(F f) {
    std::vector<std::shared_ptr<HttpSession>> live;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& w : sessions) {
        if (auto s = w.lock()) live.push_back(std::move(s));
      }
    }
    for (auto& s : live) net::post(s->executor(), [s, f] { f(*s); });
  }

  bool wait_sessions(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (live_sessions.load() > 0) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
};

HttpServer::HttpServer(ServerOptions options, RequestHandler& handler, ServerMetrics* metrics)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->ctx.options = &impl_->options;
  impl_->ctx.handler = &handler;
  impl_->ctx.metrics = metrics;
  impl_->ctx.live_sessions = &impl_->live_sessions;
  impl_->ctx.gate = std::make_shared<http_detail::PostGate>();
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.started) return;
    m.started = true;
  }
  const std::string where = m.options.host + ":" + std::to_string(m.options.port);
  try {
    const auto address = net::ip::make_address(m.options.host);
    const tcp::endpoint endpoint(address, m.options.port);
    m.acceptor.open(endpoint.protocol());
    m.acceptor.set_option(net::socket_base::reuse_address(true));
    m.acceptor.bind(endpoint);
    m.acceptor.listen(net::socket_base::max_listen_connections);
    m.port = m.acceptor.local_endpoint().port();
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot listen on " + where + ": " + e.what());
  }
  m.work.emplace(m.ioc.get_executor());
  m.accept();
  const unsigned n = std::max(1u, m.options.io_threads);
  for (unsigned i = 0; i < n; ++i) m.threads.emplace_back([&m] { m.ioc.run(); });
}

uint16_t HttpServer::port() const {
  return impl_->port;
}

void HttpServer::stop() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (!m.started || m.stopped) return;
    m.stopped = true;
  }
  net::post(m.acceptor.get_executor(), [&m] {
    boost::system::error_code ec;
    m.acceptor.close(ec);
  });
  m.for_each_session([](HttpSession& s) { s.begin_shutdown(); });
  if (!m.wait_sessions(m.options.shutdown_grace)) {
    m.for_each_session([](HttpSession& s) { s.force_close(); });
    m.wait_sessions(std::chrono::milliseconds(5000));
  }
  m.work.reset();
  m.ioc.stop();
  for (auto& t : m.threads) t.join();
  m.threads.clear();
  m.close_gate();
}

void HttpServer::run_until_signal(const std::function<void()>& on_armed) {
  Impl& m = *impl_;
  start();
  net::signal_set signals(m.ioc, SIGINT, SIGTERM);
  signals.async_wait([&m](boost::system::error_code ec, int) {
    if (ec) return;  // cancelled: the set is being destroyed
    std::lock_guard<std::mutex> lock(m.mu);
    m.stop_requested = true;
    m.stop_cv.notify_all();
  });
  if (on_armed) on_armed();
  {
    std::unique_lock<std::mutex> lock(m.mu);
    m.stop_cv.wait(lock, [&m] { return m.stop_requested; });
  }
  boost::system::error_code ec;
  signals.cancel(ec);
  stop();
}

void HttpServer::request_stop() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stop_requested = true;
  impl_->stop_cv.notify_all();
}

}  // namespace ds
