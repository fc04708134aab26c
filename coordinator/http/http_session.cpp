#include "coordinator/http/http_session.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <cctype>
#include <cstdio>

#include "coordinator/http/api_error.h"
#include "coordinator/http/framing.h"

namespace ds::http_detail {

namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

// Hands a handler's reply to its session. Posting keeps all session state on the strand, and
// the weak pointer makes calls after the client left harmless. If the handler drops the
// channel without finishing, the destructor finishes for it (500, or the end of the stream)
// so the client never waits forever.
class SessionChannel : public ResponseChannel {
 public:
  SessionChannel(std::weak_ptr<HttpSession> session, net::any_io_executor ex, std::shared_ptr<PostGate> gate,
                 uint64_t gen)
      : session_(std::move(session)), ex_(std::move(ex)), gate_(std::move(gate)), gen_(gen) {}

  ~SessionChannel() override {
    const int state = state_.load();
    if (state == kNone) {
      post([gen = gen_](HttpSession& s) {
        s.respond(gen, error_response(500, "The request handler produced no reply"));
      });
    } else if (state == kStreaming) {
      post([gen = gen_](HttpSession& s) { s.end_stream(gen); });
    }
  }

  void respond(HttpResponse response) override {
    state_ = kDone;
    post([gen = gen_, r = std::move(response)](HttpSession& s) mutable { s.respond(gen, std::move(r)); });
  }
  void begin_stream(int status, std::string content_type) override {
    state_ = kStreaming;
    post([gen = gen_, status, ct = std::move(content_type)](HttpSession& s) { s.begin_stream(gen, status, ct); });
  }
  void stream_data(std::string bytes) override {
    post([gen = gen_, b = std::move(bytes)](HttpSession& s) mutable { s.stream_data(gen, std::move(b)); });
  }
  void end_stream() override {
    state_ = kDone;
    post([gen = gen_](HttpSession& s) { s.end_stream(gen); });
  }

 private:
  enum { kNone, kStreaming, kDone };

  template <class F>
  void post(F&& f) {
    std::lock_guard<std::mutex> lock(gate_->mu);
    if (!gate_->open) return;
    net::post(ex_, [weak = session_, f = std::forward<F>(f)]() mutable {
      if (auto s = weak.lock()) f(*s);
    });
  }

  std::weak_ptr<HttpSession> session_;
  net::any_io_executor ex_;
  std::shared_ptr<PostGate> gate_;
  uint64_t gen_;
  std::atomic<int> state_{kNone};
};

HttpRequest to_http_request(http::request<http::string_body>&& req) {
  HttpRequest out;
  out.method = std::string(req.method_string());
  const std::string target(req.target());
  const size_t q = target.find('?');
  out.path = target.substr(0, q);
  if (q != std::string::npos) out.query = target.substr(q + 1);
  for (const auto& field : req) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  out.body = std::move(req.body());
  return out;
}

bool is_protocol_error(const beast::error_code& ec) {
  // end_of_stream / partial_message are the peer closing, not a malformed request.
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return false;
  return ec.category() == http::make_error_code(http::error::bad_target).category();
}

std::string hex(size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%zx", n);
  return buf;
}

}  // namespace

HttpSession::HttpSession(tcp::socket socket, const SessionContext& ctx)
    : ctx_(ctx), socket_(std::move(socket)), executor_(socket_.get_executor()), deadline_(executor_) {
  if (ctx_.live_sessions != nullptr) ++*ctx_.live_sessions;
}

HttpSession::~HttpSession() {
  if (ctx_.live_sessions != nullptr) --*ctx_.live_sessions;
}

void HttpSession::start() {
  net::post(executor_, [self = shared_from_this()] { self->start_read(); });
}

// ---- reading -------------------------------------------------------------------------------

void HttpSession::start_read() {
  if (closed_ || read_broken_ || reading_ || pending_) return;
  parser_.emplace();
  parser_->body_limit(ctx_.options->max_body_bytes);
  parser_->header_limit(static_cast<uint32_t>(ctx_.options->max_header_bytes));
  reading_ = true;
  // While a reply is in progress the read only watches for the client leaving (or a
  // pipelined request); it must not time out then.
  if (!busy_) arm_deadline(ctx_.options->idle_timeout);
  http::async_read_header(socket_, buffer_, *parser_,
                          beast::bind_front_handler(&HttpSession::on_header, shared_from_this()));
}

void HttpSession::on_header(beast::error_code ec, size_t) {
  if (ec) return on_read_error(ec);
  if (closed_) return;
  const auto& header = parser_->get();
  std::vector<std::string_view> transfer_encodings;
  for (auto [it, end] = header.equal_range(http::field::transfer_encoding); it != end; ++it) {
    transfer_encodings.emplace_back(it->value().data(), it->value().size());
  }
  const bool has_length = header.find(http::field::content_length) != header.end();
  if (const auto bad = http_rules::check_request_framing(transfer_encodings, has_length)) {
    return reject_framing(bad->status, bad->message);
  }
  if (!busy_) {
    arm_deadline(ctx_.options->read_timeout);
    // curl waits (1 s) for this before sending a large body.
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      enqueue("HTTP/1.1 100 Continue\r\n\r\n");
    }
  }
  http::async_read(socket_, buffer_, *parser_, beast::bind_front_handler(&HttpSession::on_read, shared_from_this()));
}

void HttpSession::on_read(beast::error_code ec, size_t) {
  if (ec) return on_read_error(ec);
  reading_ = false;
  if (closed_) return;
  const bool keep_alive = parser_->keep_alive();
  HttpRequest request = to_http_request(parser_->release());
  parser_.reset();
  if (busy_) {
    pending_ = Pending{std::move(request), keep_alive};  // answered after the current reply
    return;
  }
  disarm_deadline();
  keep_alive_ = keep_alive;
  dispatch(std::move(request));
}

void HttpSession::on_read_error(beast::error_code ec) {
  reading_ = false;
  if (closed_) return;
  if (!is_protocol_error(ec)) {
    // The peer closed or reset (or our deadline closed the socket).
    if (busy_) {
      client_gone();
    } else {
      close();
    }
    return;
  }
  read_broken_ = true;
  if (busy_) {
    keep_alive_ = false;  // finish the current reply, then close
    return;
  }
  if (ec == http::error::body_limit) {
    send_error_and_close(
        413, "Request body exceeds the limit of " + std::to_string(ctx_.options->max_body_bytes) + " bytes");
  } else if (ec == http::error::header_limit) {
    send_error_and_close(431, "Request header fields too large");
  } else {
    send_error_and_close(400, "Malformed HTTP request: " + ec.message());
  }
}

void HttpSession::reject_framing(int status, const std::string& message) {
  reading_ = false;
  read_broken_ = true;
  parser_.reset();
  if (busy_) {
    keep_alive_ = false;  // finish the current reply, then close; nothing after it is read
    return;
  }
  disarm_deadline();
  send_error_and_close(status, message);
}

void HttpSession::dispatch(HttpRequest request) {
  busy_ = true;
  reply_complete_ = false;
  stream_open_ = false;
  const uint64_t gen = ++reply_gen_;
  auto channel = std::make_shared<SessionChannel>(weak_from_this(), executor_, ctx_.gate, gen);
  try {
    on_disconnect_ = ctx_.handler->handle(std::move(request), std::move(channel));
  } catch (...) {
    // Handlers report errors through the channel; the channel's destructor has already
    // queued a 500 if nothing was sent.
    on_disconnect_ = nullptr;
  }
  start_read();
}

// ---- replies ---------------------------------------------------------------------------------

std::string HttpSession::header_block(int status, const std::string& content_type,
                                      const std::vector<std::pair<std::string, std::string>>& extra,
                                      const std::string& framing) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " ";
  const auto reason = http::obsolete_reason(static_cast<http::status>(status));
  h.append(reason.data(), reason.size());
  h.append("\r\nServer: deltaserve\r\nContent-Type: ").append(content_type).append("\r\n");
  for (const auto& [k, v] : extra) h.append(k).append(": ").append(v).append("\r\n");
  h.append(framing);
  h.append(keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");
  return h;
}

void HttpSession::respond(uint64_t gen, HttpResponse response) {
  if (gen != reply_gen_ || closed_ || !busy_ || reply_complete_ || stream_open_) return;
  if (shutting_down_) keep_alive_ = false;
  const std::string framing = "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
  std::string bytes = header_block(response.status, response.content_type, response.headers, framing);
  bytes.append(response.body);
  reply_complete_ = true;
  enqueue(std::move(bytes));
}

void HttpSession::begin_stream(uint64_t gen, int status, const std::string& content_type) {
  if (gen != reply_gen_ || closed_ || !busy_ || reply_complete_ || stream_open_) return;
  if (shutting_down_) keep_alive_ = false;
  stream_open_ = true;
  stream_is_sse_ = content_type.rfind("text/event-stream", 0) == 0;
  // X-Accel-Buffering: reverse proxies (nginx) must not batch events.
  enqueue(header_block(status, content_type, {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}},
                       "Transfer-Encoding: chunked\r\n"));
}

void HttpSession::stream_data(uint64_t gen, std::string bytes) {
  if (gen != reply_gen_ || closed_ || !stream_open_ || reply_complete_ || bytes.empty()) return;
  std::string chunk = hex(bytes.size());
  chunk.append("\r\n").append(bytes).append("\r\n");
  enqueue(std::move(chunk));
}

void HttpSession::end_stream(uint64_t gen) {
  if (gen != reply_gen_ || closed_ || !stream_open_ || reply_complete_) return;
  reply_complete_ = true;
  enqueue("0\r\n\r\n");
}

void HttpSession::send_error_and_close(int status, const std::string& message) {
  if (ctx_.metrics != nullptr) ctx_.metrics->record_status(status);
  keep_alive_ = false;
  close_after_write_ = true;
  const HttpResponse r = error_response(status, message);
  const std::string framing = "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  enqueue(header_block(r.status, r.content_type, r.headers, framing) + r.body);
}

// ---- writing ---------------------------------------------------------------------------------

void HttpSession::enqueue(std::string bytes) {
  write_queue_.push_back(std::move(bytes));
  if (!writing_) write_next();
}

void HttpSession::write_next() {
  if (closed_) return;
  // Coalesce: a fast generator's SSE events go out in one write.
  while (write_queue_.size() > 1) {
    std::string next = std::move(write_queue_[1]);
    write_queue_.erase(write_queue_.begin() + 1);
    write_queue_.front().append(next);
  }
  writing_ = true;
  arm_deadline(ctx_.options->write_timeout);
  net::async_write(socket_, net::buffer(write_queue_.front()),
                   beast::bind_front_handler(&HttpSession::on_write, shared_from_this()));
}

void HttpSession::on_write(beast::error_code ec, size_t) {
  writing_ = false;
  if (closed_) return;
  if (ec) return client_gone();
  write_queue_.pop_front();
  if (!write_queue_.empty()) return write_next();
  disarm_deadline();
  if (close_after_write_) return linger_then_close();
  if (busy_ && reply_complete_) return on_reply_done();
  if (!busy_ && reading_) arm_deadline(ctx_.options->read_timeout);  // after "100 Continue"
}

void HttpSession::on_reply_done() {
  busy_ = false;
  stream_open_ = false;
  on_disconnect_ = nullptr;
  if (!keep_alive_ || shutting_down_ || read_broken_) return close();
  if (pending_) {
    Pending p = std::move(*pending_);
    pending_.reset();
    keep_alive_ = p.keep_alive;
    dispatch(std::move(p.request));
    return;
  }
  if (reading_) {
    arm_deadline(ctx_.options->idle_timeout);
  } else {
    start_read();
  }
}

// ---- closing ---------------------------------------------------------------------------------

void HttpSession::client_gone() {
  if (closed_) return;
  DisconnectHook hook = std::move(on_disconnect_);
  on_disconnect_ = nullptr;
  const bool unfinished = busy_ && !reply_complete_;
  close();
  if (unfinished && hook) {
    try {
      hook();
    } catch (...) {
      // A failing cancel must not take the I/O thread down.
    }
  }
}

void HttpSession::close() {
  if (closed_) return;
  closed_ = true;
  disarm_deadline();
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

// After an error reply the client may still be sending its (rejected) body; closing with
// unread data would reset the connection and could destroy the reply in flight. So: send
// FIN, discard input until the client closes (or a short deadline), then close.
void HttpSession::linger_then_close() {
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  arm_deadline(std::min(ctx_.options->read_timeout, std::chrono::milliseconds(2000)));
  drain_buf_.resize(16 * 1024);
  drain();
}

void HttpSession::drain() {
  socket_.async_read_some(net::buffer(drain_buf_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec || self->closed_) return self->close();
    self->drain();
  });
}

void HttpSession::begin_shutdown() {
  shutting_down_ = true;
  if (!busy_ && !writing_) close();
}

// The grace period is over. A reply still in progress is ended properly rather than cut: a
// stream gets an error event and [DONE] (SSE) and its terminating chunk, a reply not yet
// started gets a 503; then the request is cancelled and the connection closes.
void HttpSession::force_close() {
  if (closed_) return;
  if (!busy_ || reply_complete_) return client_gone();
  const std::string message = "The server is shutting down; the request was stopped";
  DisconnectHook hook = std::move(on_disconnect_);
  on_disconnect_ = nullptr;
  keep_alive_ = false;
  if (stream_open_) {
    if (stream_is_sse_) {
      const std::string events =
          "data: " + error_json(message, "server_error", {}, "server_shutdown") + "\n\ndata: [DONE]\n\n";
      enqueue(hex(events.size()) + "\r\n" + events + "\r\n");
    }
    reply_complete_ = true;
    close_after_write_ = true;
    enqueue("0\r\n\r\n");
  } else {
    send_error_and_close(503, message);
    reply_complete_ = true;
  }
  if (hook) {
    try {
      hook();
    } catch (...) {
      // The reply is already on its way; a failing cancel changes nothing for the client.
    }
  }
}

void HttpSession::arm_deadline(std::chrono::milliseconds timeout) {
  const uint64_t gen = ++deadline_gen_;
  deadline_.expires_after(timeout);
  deadline_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->deadline_gen_ || self->closed_) return;
    self->on_timeout();
  });
}

void HttpSession::disarm_deadline() {
  ++deadline_gen_;
  deadline_.cancel();
}

void HttpSession::on_timeout() {
  // Busy: the client stopped reading our reply. Idle: keep-alive expired or a slow request.
  if (busy_) {
    client_gone();
  } else {
    close();
  }
}

}  // namespace ds::http_detail
