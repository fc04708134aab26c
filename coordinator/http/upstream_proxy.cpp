#include "coordinator/http/upstream_proxy.h"

#include <algorithm>
#include <array>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cctype>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include "coordinator/http/api_error.h"

namespace ds {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// ---- URL -----------------------------------------------------------------------------------

namespace {

constexpr const char* kUrlShape = "expected http://host[:port][/path]";

[[noreturn]] void bad_url(const std::string& url, const std::string& why) {
  throw std::invalid_argument("invalid upstream URL '" + url + "': " + why);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

uint16_t parse_port(const std::string& url, std::string_view text) {
  if (text.empty()) bad_url(url, "the port is empty; " + std::string(kUrlShape));
  unsigned long value = 0;
  for (const char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c)))
      bad_url(url, "the port '" + std::string(text) + "' is not a number");
    value = value * 10 + static_cast<unsigned long>(c - '0');
    if (value > 65535) break;
  }
  if (value < 1 || value > 65535) bad_url(url, "the port " + std::string(text) + " is outside 1..65535");
  return static_cast<uint16_t>(value);
}

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}
bool is_ipv6_char(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
}

// Fills host and port from "host", "host:port", "[v6]" or "[v6]:port".
void parse_authority(const std::string& url, std::string_view authority, UpstreamUrl& out) {
  if (authority.find('@') != std::string_view::npos) {
    bad_url(url, "user info is not supported (give the upstream's key as the API key option)");
  }
  std::string_view port_text;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) bad_url(url, "an IPv6 address lacks its closing ']'");
    out.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') bad_url(url, "unexpected characters after the IPv6 address");
    has_port = !after.empty();
    if (has_port) port_text = after.substr(1);
    for (const char c : out.host) {
      if (!is_ipv6_char(c)) bad_url(url, "'" + out.host + "' is not an IPv6 address");
    }
  } else {
    const size_t colon = authority.find(':');
    if (colon != std::string_view::npos && authority.find(':', colon + 1) != std::string_view::npos) {
      bad_url(url, "an IPv6 address must be written in brackets, as http://[::1]:8000");
    }
    out.host = std::string(authority.substr(0, colon));
    has_port = colon != std::string_view::npos;
    if (has_port) port_text = authority.substr(colon + 1);
    for (const char c : out.host) {
      if (!is_name_char(c)) bad_url(url, "the host '" + out.host + "' holds a character not allowed in a host name");
    }
  }
  if (out.host.empty()) bad_url(url, "no host; " + std::string(kUrlShape));
  out.port = has_port ? parse_port(url, port_text) : 80;
}

}  // namespace

UpstreamUrl parse_upstream_url(const std::string& url) {
  const size_t sep = url.find("://");
  if (url.empty() || sep == std::string::npos) bad_url(url, "no scheme; " + std::string(kUrlShape));
  const std::string scheme = lower(std::string_view(url).substr(0, sep));
  if (scheme == "https") {
    bad_url(url,
            "https is not supported (the proxy speaks plain HTTP): use http://, or let a TLS-terminating proxy "
            "in front of the upstream take https");
  }
  if (scheme != "http") bad_url(url, "the scheme '" + scheme + "' is not supported; " + std::string(kUrlShape));
  const std::string_view rest = std::string_view(url).substr(sep + 3);
  if (rest.find_first_of("?#") != std::string_view::npos) bad_url(url, "a query or a fragment is not allowed");
  for (const char c : rest) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f') bad_url(url, "it holds a space or a control character");
  }
  const size_t slash = rest.find('/');
  UpstreamUrl out;
  parse_authority(url, rest.substr(0, slash), out);
  if (slash != std::string_view::npos) out.base_path = std::string(rest.substr(slash));
  while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  return out;
}

std::string UpstreamUrl::origin() const {
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string UpstreamUrl::host_header() const {
  const bool v6 = host.find(':') != std::string::npos;
  std::string h = v6 ? "[" + host + "]" : host;
  if (port != 80) h += ":" + std::to_string(port);
  return h;
}

// ---- one forwarded request -----------------------------------------------------------------

namespace upstream_detail {

// Everything a call reads from its proxy; lives as long as the proxy's threads.
struct Shared {
  UpstreamOptions options;
  UpstreamUrl url;
  std::string label;  // "the embedding upstream http://host:port"
};

// One request's life on the upstream: resolve, connect, write, read the header, relay the body.
// All of it runs on the call's strand; `finished_` makes the first outcome (reply, failure,
// client disconnect, proxy shutdown) the only one the channel sees.
class ProxyCall : public std::enable_shared_from_this<ProxyCall> {
 public:
  using Done = std::function<void(uint64_t)>;

  ProxyCall(net::io_context& ioc, const Shared& shared, uint64_t id, Done on_done,
            http::request<http::string_body> request, std::shared_ptr<ResponseChannel> channel)
      : shared_(shared),
        id_(id),
        on_done_(std::move(on_done)),
        strand_(net::make_strand(ioc)),
        resolver_(strand_),
        socket_(strand_),
        timer_(strand_),
        request_(std::move(request)),
        channel_(std::move(channel)) {}

  void start() {
    net::post(strand_, [self = shared_from_this()] { self->resolve(); });
  }
  // The client went away: drop the upstream connection, never touch the channel again.
  void cancel() {
    net::post(strand_, [self = shared_from_this()] {
      if (self->finished_) return;
      self->channel_.reset();
      self->finish();
    });
  }
  void shut_down() {
    net::post(strand_, [self = shared_from_this()] {
      self->fail(503, "proxy_shutdown",
                 "the server is shutting down; the request to " + self->shared_.label + " was stopped");
    });
  }

 private:
  enum class Phase { kConnecting, kAwaitingHeader, kReadingBody };

  void resolve() {
    if (finished_) return;
    arm(shared_.options.connect_timeout);
    resolver_.async_resolve(shared_.url.host, std::to_string(shared_.url.port),
                            [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type results) {
                              self->on_resolve(ec, std::move(results));
                            });
  }

  void on_resolve(beast::error_code ec, tcp::resolver::results_type results) {
    if (finished_) return;
    if (ec) return on_error(ec);
    net::async_connect(socket_, results,
                       [self = shared_from_this()](beast::error_code e, const tcp::endpoint&) { self->on_connect(e); });
  }

  void on_connect(beast::error_code ec) {
    if (finished_) return;
    if (ec) return on_error(ec);
    phase_ = Phase::kAwaitingHeader;
    // The response clock starts with the write: an upstream that stops reading is as silent
    // as one that does not answer.
    arm(shared_.options.response_timeout);
    http::async_write(socket_, request_,
                      [self = shared_from_this()](beast::error_code e, size_t) { self->on_write(e); });
  }

  void on_write(beast::error_code ec) {
    if (finished_) return;
    if (ec) return on_error(ec);
    parser_.emplace();
    parser_->body_limit(shared_.options.max_response_bytes);
    parser_->header_limit(64 * 1024);
    if (request_.method() == http::verb::head) parser_->skip(true);
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code e, size_t) { self->on_header(e); });
  }

  void on_header(beast::error_code ec) {
    if (finished_) return;
    if (ec) return on_error(ec);
    const auto& header = parser_->get();
    status_ = static_cast<int>(header.result_int());
    content_type_ = std::string(header[http::field::content_type]);
    if (content_type_.empty()) content_type_ = "application/octet-stream";
    retry_after_ = std::string(header[http::field::retry_after]);
    // Chunked means the upstream sends as it goes (SSE, or a long reply): pass it on the same way.
    streaming_ = parser_->chunked() || beast::iequals(content_type_.substr(0, 17), "text/event-stream");
    sse_ = beast::iequals(content_type_.substr(0, 17), "text/event-stream");
    phase_ = Phase::kReadingBody;
    // Not eager: an eager parser goes on past a chunk's data to the next chunk header and waits
    // for it, which would hold an event until the one after it arrives.
    parser_->eager(false);
    if (streaming_) channel_->begin_stream(status_, content_type_);
    read_body();
  }

  void read_body() {
    if (parser_->is_done()) return complete();
    auto& body = parser_->get().body();
    body.data = chunk_.data();
    body.size = chunk_.size();
    arm(shared_.options.response_timeout);
    http::async_read_some(socket_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code e, size_t) { self->on_body(e); });
  }

  void on_body(beast::error_code ec) {
    if (finished_) return;
    if (ec == http::error::need_buffer) ec = {};  // our chunk buffer is full: relay it, read on
    // What arrived before an error is relayed first (a stream cut short keeps its last events).
    const size_t got = chunk_.size() - parser_->get().body().size;
    if (got > 0) {
      if (streaming_) {
        channel_->stream_data(std::string(chunk_.data(), got));
      } else {
        body_.append(chunk_.data(), got);
      }
    }
    if (ec) return on_error(ec);
    read_body();
  }

  // The call is finished before the channel hears of it, so a channel that throws leaves no
  // connection behind.
  void complete() {
    const auto channel = std::move(channel_);
    finish();
    if (streaming_) {
      channel->end_stream();
      return;
    }
    HttpResponse response;
    response.status = status_;
    response.content_type = content_type_;
    response.body = std::move(body_);
    if (!retry_after_.empty()) response.headers.emplace_back("Retry-After", retry_after_);
    channel->respond(std::move(response));
  }

  // Every failure of a socket operation lands here; it is told apart by what was going on.
  void on_error(beast::error_code ec) {
    const auto& o = shared_.options;
    if (timed_out_ && phase_ == Phase::kConnecting) {
      return fail(
          502, "upstream_unreachable",
          shared_.label + " is unreachable: no connection within " + std::to_string(o.connect_timeout.count()) + " ms");
    }
    if (timed_out_) {
      const std::string what = phase_ == Phase::kAwaitingHeader ? " did not answer within " : " went silent for ";
      return fail(504, "upstream_timeout", shared_.label + what + std::to_string(o.response_timeout.count()) + " ms");
    }
    if (ec == http::error::body_limit) {
      return fail(502, "upstream_response_too_large",
                  shared_.label + " sent a response larger than " + std::to_string(o.max_response_bytes) + " bytes");
    }
    if (phase_ == Phase::kConnecting) {
      return fail(502, "upstream_unreachable", shared_.label + " is unreachable: " + ec.message());
    }
    const bool closed = ec == http::error::end_of_stream || ec == http::error::partial_message ||
                        ec == net::error::eof || ec == net::error::connection_reset || ec == net::error::broken_pipe;
    if (closed) {
      const char* what = phase_ == Phase::kAwaitingHeader ? " closed the connection without answering"
                                                          : " closed the connection before its reply was complete";
      return fail(502, "upstream_closed", shared_.label + what);
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category()) {
      return fail(502, "upstream_bad_response", shared_.label + " sent a malformed HTTP response: " + ec.message());
    }
    fail(502, "upstream_error", shared_.label + " failed: " + ec.message());
  }

  void fail(int status, const char* code, const std::string& message) {
    if (finished_) return;
    const auto channel = std::move(channel_);
    finish();
    if (!channel) return;  // the client left
    if (phase_ == Phase::kReadingBody && streaming_) {
      // The status line is gone already: an SSE client gets an error event, any stream its end.
      if (sse_) channel->stream_data("data: " + error_json(message, default_error_type(status), {}, code) + "\n\n");
      channel->end_stream();
    } else {
      channel->respond(error_response(status, message, {}, code));
    }
  }

  void finish() {
    finished_ = true;
    channel_.reset();
    ++timer_gen_;
    timer_.cancel();
    resolver_.cancel();
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    if (on_done_) on_done_(id_);
    on_done_ = nullptr;
  }

  // A deadline closes the socket; the operation in flight then fails and on_error() sees
  // `timed_out_`.
  void arm(std::chrono::milliseconds timeout) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->timer_gen_ || self->finished_) return;
      self->timed_out_ = true;
      self->resolver_.cancel();
      beast::error_code ignored;
      self->socket_.close(ignored);
    });
  }

  const Shared& shared_;
  const uint64_t id_;
  Done on_done_;
  net::strand<net::io_context::executor_type> strand_;
  tcp::resolver resolver_;
  tcp::socket socket_;
  net::steady_timer timer_;
  http::request<http::string_body> request_;
  std::shared_ptr<ResponseChannel> channel_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  std::array<char, 64 * 1024> chunk_{};
  std::string body_;
  std::string content_type_;
  std::string retry_after_;
  int status_ = 0;
  Phase phase_ = Phase::kConnecting;
  bool streaming_ = false;
  bool sse_ = false;
  bool timed_out_ = false;
  bool finished_ = false;
  uint64_t timer_gen_ = 0;
};

}  // namespace upstream_detail

// ---- the proxy -----------------------------------------------------------------------------

using upstream_detail::ProxyCall;

struct UpstreamProxy::Impl {
  upstream_detail::Shared shared;
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work{ioc.get_executor()};
  std::vector<std::thread> threads;
  std::mutex mu;
  std::unordered_map<uint64_t, std::weak_ptr<ProxyCall>> live;  // for the shutdown
  uint64_t next_id = 0;
  bool stopping = false;

  void forget(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    live.erase(id);
  }
};

namespace {

std::string forwarded_for(const HttpRequest& request, std::string_view client_address) {
  std::string chain(request.header("x-forwarded-for"));
  if (!client_address.empty()) {
    if (!chain.empty()) chain += ", ";
    chain.append(client_address);
  }
  return chain;
}

// The upstream's request: what a reply depends on, nothing of this hop's connection.
http::request<http::string_body> upstream_request(const HttpRequest& request, const UpstreamProxy::Impl& impl,
                                                  std::string_view client_address) {
  const auto& shared = impl.shared;
  std::string target = shared.url.base_path + (request.path.empty() ? "/" : request.path);
  if (!request.query.empty()) target += "?" + request.query;
  http::request<http::string_body> req;
  req.method_string(request.method);
  req.target(target);
  req.version(11);
  req.set(http::field::host, shared.url.host_header());
  // One connection per request: the upstream closes it after the reply (see the header).
  req.keep_alive(false);
  const auto copy = [&](std::string_view name, http::field field) {
    const std::string_view value = request.header(name);
    if (!value.empty()) req.set(field, beast::string_view(value.data(), value.size()));
  };
  copy("content-type", http::field::content_type);
  copy("accept", http::field::accept);
  copy("user-agent", http::field::user_agent);
  if (shared.options.api_key.empty()) {
    copy("authorization", http::field::authorization);
  } else {
    req.set(http::field::authorization, "Bearer " + shared.options.api_key);
  }
  if (const std::string_view id = request.header("x-request-id"); !id.empty()) {
    req.set("X-Request-Id", beast::string_view(id.data(), id.size()));
  }
  if (const std::string chain = forwarded_for(request, client_address); !chain.empty()) {
    req.set("X-Forwarded-For", chain);
  }
  req.body() = request.body;
  req.prepare_payload();
  return req;
}

}  // namespace

UpstreamProxy::UpstreamProxy(UpstreamOptions options, unsigned threads) : impl_(std::make_unique<Impl>()) {
  impl_->shared.url = parse_upstream_url(options.url);
  impl_->shared.label = "the " + (options.role.empty() ? std::string("upstream") : options.role + " upstream") + " " +
                        impl_->shared.url.origin();
  impl_->shared.options = std::move(options);
  for (unsigned i = 0; i < std::max(1u, threads); ++i) {
    impl_->threads.emplace_back([impl = impl_.get()] {
      for (;;) {
        try {
          impl->ioc.run();
          return;
        } catch (...) {
          // A throwing channel must not end the thread; the call that threw is already done.
        }
      }
    });
  }
}

UpstreamProxy::~UpstreamProxy() {
  std::vector<std::shared_ptr<ProxyCall>> calls;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    for (auto& [id, weak] : impl_->live) {
      if (auto call = weak.lock()) calls.push_back(std::move(call));
    }
  }
  for (auto& call : calls) call->shut_down();
  calls.clear();
  // The threads return once the last call has finished (its socket and timer closed).
  impl_->work.reset();
  for (auto& t : impl_->threads) t.join();
}

const UpstreamUrl& UpstreamProxy::url() const {
  return impl_->shared.url;
}

DisconnectHook UpstreamProxy::forward(const HttpRequest& request, std::shared_ptr<ResponseChannel> channel,
                                      std::string_view client_address) {
  auto upstream = upstream_request(request, *impl_, client_address);
  std::shared_ptr<ProxyCall> call;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->stopping) {
      const uint64_t id = ++impl_->next_id;
      call = std::make_shared<ProxyCall>(
          impl_->ioc, impl_->shared, id, [impl = impl_.get()](uint64_t done) { impl->forget(done); },
          std::move(upstream), channel);
      impl_->live.emplace(id, call);
    }
  }
  if (!call) {
    channel->respond(error_response(503, "the server is shutting down", {}, "proxy_shutdown"));
    return {};
  }
  call->start();
  return [weak = std::weak_ptr<ProxyCall>(call)] {
    if (auto c = weak.lock()) c->cancel();
  };
}

}  // namespace ds
