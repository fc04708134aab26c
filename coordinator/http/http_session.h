// One client connection (internal to the HTTP server; includes Beast/Asio). All state is
// touched only on the connection's strand; ResponseChannel calls from other threads are
// posted there.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/http/http_types.h"
#include "coordinator/http/metrics.h"
#include "coordinator/http/server_options.h"

namespace ds::http_detail {

namespace net = boost::asio;
namespace beast = boost::beast;

// Lets reply channels post to the server's executor only while it exists: an engine may
// finish (and drop its last channel) after the server has been stopped and destroyed.
struct PostGate {
  std::mutex mu;
  bool open = true;
};

// What every session shares with the server.
struct SessionContext {
  const ServerOptions* options = nullptr;
  RequestHandler* handler = nullptr;
  ServerMetrics* metrics = nullptr;
  std::atomic<int>* live_sessions = nullptr;  // the server waits for 0 when stopping
  std::shared_ptr<PostGate> gate;
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  // `socket` must run on a strand (accepted with make_strand).
  HttpSession(net::ip::tcp::socket socket, const SessionContext& ctx);
  ~HttpSession();
  void start();
  // Server stopping: close when idle, or once the current reply is done.
  void begin_shutdown();
  // Grace period over: cancel the in-flight request and close now.
  void force_close();
  const net::any_io_executor& executor() const { return executor_; }

  // ResponseChannel operations (on the strand). `gen` names the request they belong to;
  // stale calls (a previous request, a closed connection) are dropped.
  void respond(uint64_t gen, HttpResponse response);
  void begin_stream(uint64_t gen, int status, const std::string& content_type);
  void stream_data(uint64_t gen, std::string bytes);
  void end_stream(uint64_t gen);

 private:
  using Parser = beast::http::request_parser<beast::http::string_body>;
  struct Pending {
    HttpRequest request;
    bool keep_alive = true;
  };

  void start_read();
  void on_header(beast::error_code ec, size_t bytes);
  void on_read(beast::error_code ec, size_t bytes);
  void on_read_error(beast::error_code ec);
  // A header whose framing cannot be trusted (http_rules::check_request_framing): reply and
  // close without reading anything more from the connection.
  void reject_framing(int status, const std::string& message);
  void dispatch(HttpRequest request);
  void send_error_and_close(int status, const std::string& message);
  void enqueue(std::string bytes);
  void write_next();
  void on_write(beast::error_code ec, size_t bytes);
  void on_reply_done();
  void client_gone();
  void close();
  void linger_then_close();
  void drain();
  void on_timeout();
  void arm_deadline(std::chrono::milliseconds timeout);
  void disarm_deadline();
  std::string header_block(int status, const std::string& content_type,
                           const std::vector<std::pair<std::string, std::string>>& extra, const std::string& framing);

  SessionContext ctx_;
  net::ip::tcp::socket socket_;
  net::any_io_executor executor_;  // the socket's strand
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  net::steady_timer deadline_;
  uint64_t deadline_gen_ = 0;

  uint64_t reply_gen_ = 0;       // increments per dispatched request
  bool busy_ = false;            // a request is being answered
  bool reply_complete_ = false;  // its last bytes are queued
  bool stream_open_ = false;     // a chunked reply was started
  bool stream_is_sse_ = false;   // ... as text/event-stream
  bool keep_alive_ = true;       // of the request being answered
  bool reading_ = false;         // a read is pending
  bool read_broken_ = false;     // the read side failed; no further requests
  bool shutting_down_ = false;
  bool closed_ = false;
  bool close_after_write_ = false;  // an error reply: linger, then close
  std::optional<Pending> pending_;  // a pipelined request read while busy
  std::string drain_buf_;
  DisconnectHook on_disconnect_;

  std::deque<std::string> write_queue_;
  bool writing_ = false;
};

}  // namespace ds::http_detail
