// A small asynchronous reverse proxy: a chat server forwards the embedding / rerank routes to
// another OpenAI-compatible server (`--embed-upstream`, `--rerank-upstream`) so clients know one
// port. It runs on its own Asio threads, so a slow upstream never holds the server's I/O threads,
// and it opens one HTTP/1.1 connection per forwarded request, so a dead upstream's state never
// outlives the request that saw it (after the upstream comes back, the next request works).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "coordinator/http/http_types.h"

namespace ds {

// Where an upstream lives: `http://host[:port][/base]`.
struct UpstreamUrl {
  std::string host;  // a name, an IPv4 address, or an IPv6 address without its brackets
  uint16_t port = 80;
  std::string base_path;  // "" or "/base" (never a trailing '/'): prepended to each forwarded path

  // "http://host:port" (brackets around IPv6), for messages.
  std::string origin() const;
  // The Host header's value: host, plus ":port" unless it is 80.
  std::string host_header() const;
};

// Throws std::invalid_argument with a message naming `url` and what is wrong: a scheme other
// than http (https included: the proxy speaks no TLS), no host, a port outside 1..65535, user
// info, a query or a fragment.
UpstreamUrl parse_upstream_url(const std::string& url);

struct UpstreamOptions {
  std::string url;  // http://host:port[/base] only; see parse_upstream_url
  // Named in error messages: "the embedding upstream http://... is unreachable: ...".
  std::string role = "upstream";
  // Name resolution plus the TCP connect: past it the client gets a 502.
  std::chrono::milliseconds connect_timeout{5000};
  // The longest silence of the upstream once the request is sent: until its response header,
  // then between two reads of its body (so a long stream that keeps talking is never cut).
  // Past it the client gets a 504 (or, once a stream began, the stream ends).
  std::chrono::milliseconds response_timeout{600'000};
  // Empty: the client's Authorization header is forwarded as it came. Set: it is replaced by
  // "Bearer <api_key>" (the upstream's key stays on this server).
  std::string api_key;
  // The largest response body relayed: a larger one is a 502 (a stream already begun is cut).
  size_t max_response_bytes = size_t{256} << 20;
};

class UpstreamProxy {
 public:
  // Parses options.url (throws std::invalid_argument, see parse_upstream_url) and starts
  // `threads` I/O threads (at least 1).
  explicit UpstreamProxy(UpstreamOptions options, unsigned threads = 2);
  // Requests still in flight are answered 503 and their upstream connections closed; joins the
  // threads. The proxy must outlive the server that calls forward() and the hooks it returned.
  ~UpstreamProxy();
  UpstreamProxy(const UpstreamProxy&) = delete;
  UpstreamProxy& operator=(const UpstreamProxy&) = delete;

  // Sends `request` upstream and completes `channel` with the upstream's reply; returns at once.
  // Forwarded: the method, base_path + path (+ '?' + query), the body, Content-Type, Accept,
  // Authorization (see UpstreamOptions::api_key), X-Request-Id, and X-Forwarded-For (the
  // client's chain, with `client_address` appended when it is not empty). Relayed: the status,
  // Content-Type, Retry-After and the body; a chunked or text/event-stream reply is relayed as a
  // stream while its bytes arrive. Failures are the project's JSON errors: 502 (unreachable,
  // closed early, malformed, too large), 504 (response_timeout). The returned hook (call it when
  // the client goes away) cancels the upstream request; after it the channel is not used.
  DisconnectHook forward(const HttpRequest& request, std::shared_ptr<ResponseChannel> channel,
                         std::string_view client_address = {});

  const UpstreamUrl& url() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds
