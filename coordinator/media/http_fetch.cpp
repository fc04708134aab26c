// The download is a sequence of blocking steps on a private io_context: each step starts one
// asynchronous operation and runs the context until it completes. Every socket operation goes
// through a beast::tcp_stream that expires at the download's deadline, which is what bounds
// each step (Beast's timeouts apply to asynchronous operations only).
#include "coordinator/media/http_fetch.h"

#include <netdb.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/vector_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>

#include "coordinator/media/address_policy.h"
#include "coordinator/media/image_decode.h"  // MediaError
#include "coordinator/media/remote_url.h"

namespace ds {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Parser = http::response_parser<http::vector_body<uint8_t>>;

constexpr int kMaxRedirects = 3;
constexpr uint32_t kMaxHeaderBytes = 64 << 10;

// One download: its settings and its deadline.
struct Fetch {
  const HttpFetchOptions& options;
  Clock::time_point deadline;
};

std::string lower_trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Beast 1.74's string_view is Boost's, which converts to no std type.
std::string_view view(beast::string_view s) {
  return {s.data(), s.size()};
}

std::string limit_text(size_t max_bytes) {
  return "the image limit of " + std::to_string(max_bytes) + " bytes";
}

std::string server_name(const RemoteUrl& url) {
  return "the image server " + host_header(url);
}

[[noreturn]] void timed_out(const Fetch& f) {
  std::ostringstream seconds;
  seconds << static_cast<double>(f.options.timeout.count()) / 1000;
  throw MediaError("downloading the image took longer than this server's limit of " + seconds.str() + " s");
}

[[noreturn]] void failed(const Fetch& f, const beast::error_code& ec, const std::string& what) {
  if (ec == beast::error::timeout) timed_out(f);
  throw MediaError(what + ": " + ec.message());
}

// ---- the allow-list and the addresses -------------------------------------------------------

void check_allowed(const RemoteUrl& url, const std::vector<std::string>& allowed) {
  if (allowed.empty()) {
    throw MediaError(
        "remote image URLs (http://, https://) are off on this server (the operator enables them for chosen hosts "
        "with --allowed-media-domains); send the image as a base64 data: URL");
  }
  if (!media_host_allowed(url, allowed)) {
    throw MediaError("the image host '" + url.host + "' is not in this server's allowed media domains");
  }
}

struct Lookup {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  int status = 0;
  std::vector<net::ip::address> addresses;
};

net::ip::address address_of(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, sa, sizeof in);
    return net::ip::address_v4(ntohl(in.sin_addr.s_addr));
  }
  sockaddr_in6 in6{};
  std::memcpy(&in6, sa, sizeof in6);
  net::ip::address_v6::bytes_type bytes{};
  std::memcpy(bytes.data(), &in6.sin6_addr, bytes.size());
  return net::ip::address_v6(bytes, in6.sin6_scope_id);
}

void run_lookup(const std::shared_ptr<Lookup>& lookup, const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const int status = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
  std::vector<net::ip::address> found;
  for (const addrinfo* a = status == 0 ? list : nullptr; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6) found.push_back(address_of(a->ai_addr));
  }
  if (list != nullptr) ::freeaddrinfo(list);
  std::lock_guard lock(lookup->mutex);
  lookup->status = status;
  lookup->addresses = std::move(found);
  lookup->done = true;
  lookup->finished.notify_all();
}

// Every address `host` resolves to, by the deadline.
std::vector<net::ip::address> resolve(const std::string& host, const Fetch& f) {
  auto lookup = std::make_shared<Lookup>();
  // getaddrinfo cannot be cancelled: it runs on a thread of its own, which outlives a wait that
  // times out and then only drops its result (the Lookup it shares).
  std::thread([lookup, host] { run_lookup(lookup, host); }).detach();
  std::unique_lock lock(lookup->mutex);
  if (!lookup->finished.wait_until(lock, f.deadline, [&] { return lookup->done; })) timed_out(f);
  if (lookup->status != 0) {
    throw MediaError("the image host '" + host + "' cannot be resolved: " + ::gai_strerror(lookup->status));
  }
  if (lookup->addresses.empty()) throw MediaError("the image host '" + host + "' has no IPv4 or IPv6 address");
  return lookup->addresses;
}

// Where to connect: the host's addresses, each vetted. Connecting to exactly these (never
// resolving again) is what defeats DNS rebinding.
std::vector<tcp::endpoint> vetted_endpoints(const RemoteUrl& url, const Fetch& f) {
  // An IP literal host got through the allow-list only as an IP entry: the operator's trusted
  // address, private or not (remote_url.h).
  if (url.host_is_ip) return {tcp::endpoint(net::ip::make_address(url.host), url.port)};
  std::vector<tcp::endpoint> out;
  for (const net::ip::address& a : resolve(url.host, f)) {
    if (const std::optional<std::string> kind = non_public_address_kind(a)) {
      throw MediaError("the image host '" + url.host + "' resolves to " + a.to_string() + ", " + *kind +
                       "; images are downloaded only from public addresses");
    }
    const tcp::endpoint e(a, url.port);
    if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
  }
  return out;
}

// ---- one request and its answer -------------------------------------------------------------

// Starts the one operation `start` begins (handing it the completion handler) and runs `ioc`
// until that operation has completed; its error.
template <class Start>
beast::error_code run_one(net::io_context& ioc, Start&& start) {
  beast::error_code result = net::error::operation_aborted;
  start([&result](const beast::error_code& ec, auto&&...) { result = ec; });
  ioc.restart();
  ioc.run();
  return result;
}

template <class Stream>
void connect(Stream& stream, net::io_context& ioc, const std::vector<tcp::endpoint>& endpoints, const RemoteUrl& url,
             const Fetch& f) {
  beast::tcp_stream& socket = beast::get_lowest_layer(stream);
  socket.expires_at(f.deadline);
  const beast::error_code ec = run_one(ioc, [&](auto handler) { socket.async_connect(endpoints, std::move(handler)); });
  if (ec) failed(f, ec, "cannot connect to " + server_name(url));
}

http::request<http::empty_body> make_request(const RemoteUrl& url) {
  http::request<http::empty_body> request{http::verb::get, url.target, 11};
  request.set(http::field::host, host_header(url));
  request.set(http::field::user_agent, "deltaserve");
  request.set(http::field::accept, "image/*");
  request.set(http::field::connection, "close");
  return request;
}

// A redirect's Location; nullopt for any other answer (a 3xx without one is refused as a status).
std::optional<std::string> redirect_location(const http::response_header<>& answer) {
  switch (answer.result()) {
    case http::status::moved_permanently:
    case http::status::found:
    case http::status::see_other:
    case http::status::temporary_redirect:
    case http::status::permanent_redirect:
      break;
    default:
      return std::nullopt;
  }
  const std::string_view location = view(answer[http::field::location]);
  if (location.empty()) return std::nullopt;
  return std::string(location);
}

void check_answer(const Parser& parser, size_t max_bytes, const std::string& server) {
  const http::response_header<>& answer = parser.get();
  const unsigned status = answer.result_int();
  if (status < 200 || status > 299) {
    const std::string reason(view(answer.reason()).substr(0, 80));
    throw MediaError(server + " answered " + std::to_string(status) + (reason.empty() ? "" : " " + reason));
  }
  const std::string_view type_field = view(answer[http::field::content_type]);
  const std::string type = lower_trimmed(type_field.substr(0, type_field.find(';')));
  const bool image_type = type.starts_with("image/") && type.size() > 6;
  if (answer.count(http::field::content_type) != 0 && !image_type && type != "application/octet-stream") {
    throw MediaError(server + " sent Content-Type '" + type + "', not an image");
  }
  const std::string encoding = lower_trimmed(view(answer[http::field::content_encoding]));
  if (!encoding.empty() && encoding != "identity") {
    throw MediaError(server + " sent the image with Content-Encoding '" + encoding + "', which is not supported");
  }
  const boost::optional<uint64_t> length = parser.content_length();
  if (length && *length > max_bytes) {
    throw MediaError(server + "'s image is " + std::to_string(*length) + " bytes (Content-Length), over " +
                     limit_text(max_bytes));
  }
}

struct Hop {
  std::optional<std::string> location;  // a redirect's
  std::vector<uint8_t> body;
};

template <class Stream>
Hop exchange(Stream& stream, net::io_context& ioc, const RemoteUrl& url, const Fetch& f) {
  beast::tcp_stream& socket = beast::get_lowest_layer(stream);
  const std::string server = server_name(url);
  const http::request<http::empty_body> request = make_request(url);
  socket.expires_at(f.deadline);
  beast::error_code ec = run_one(ioc, [&](auto handler) { http::async_write(stream, request, std::move(handler)); });
  if (ec) failed(f, ec, "sending the request to " + server + " failed");
  beast::flat_buffer buffer;
  Parser parser;
  parser.header_limit(kMaxHeaderBytes);
  // Beast 1.74 takes an unset body limit for one below every Content-Length, so the header is
  // read under the largest limit, checked by check_answer, and the body read under the cap.
  parser.body_limit(std::numeric_limits<uint64_t>::max());
  socket.expires_at(f.deadline);
  ec = run_one(ioc, [&](auto handler) { http::async_read_header(stream, buffer, parser, std::move(handler)); });
  if (ec) failed(f, ec, "reading the answer of " + server + " failed");
  if (std::optional<std::string> location = redirect_location(parser.get())) return {std::move(location), {}};
  check_answer(parser, f.options.max_bytes, server);
  parser.body_limit(f.options.max_bytes);
  socket.expires_at(f.deadline);
  ec = run_one(ioc, [&](auto handler) { http::async_read(stream, buffer, parser, std::move(handler)); });
  if (ec == http::error::body_limit) {
    throw MediaError("the image from " + server + " exceeds " + limit_text(f.options.max_bytes));
  }
  if (ec) failed(f, ec, "reading the image from " + server + " failed");
  Hop hop;
  hop.body = std::move(parser.get().body());
  if (hop.body.empty()) throw MediaError(server + " sent an empty image");
  return hop;
}

// ---- TLS ------------------------------------------------------------------------------------

ssl::context tls_context(const HttpFetchOptions& options) {
  ssl::context context(ssl::context::tls_client);
  context.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  context.set_default_verify_paths();  // the system's trust store (ca-certificates)
  if (!options.extra_ca_pem.empty()) context.add_certificate_authority(net::buffer(options.extra_ca_pem));
  context.set_verify_mode(ssl::verify_peer);
  return context;
}

// The certificate must name the URL's host: OpenSSL checks it during the handshake, which fails
// otherwise. SNI names the host for servers with several certificates (never an IP: RFC 6066).
void expect_peer(SSL* tls, const RemoteUrl& url) {
  X509_VERIFY_PARAM* param = SSL_get0_param(tls);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  const bool ok = url.host_is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, url.host.c_str()) == 1
                                 : SSL_set_tlsext_host_name(tls, url.host.c_str()) == 1 &&
                                       X509_VERIFY_PARAM_set1_host(param, url.host.c_str(), 0) == 1;
  if (!ok) throw MediaError("cannot set up TLS for the image host '" + url.host + "'");
}

void handshake(beast::ssl_stream<beast::tcp_stream>& stream, net::io_context& ioc, const RemoteUrl& url,
               const Fetch& f) {
  beast::get_lowest_layer(stream).expires_at(f.deadline);
  const beast::error_code ec =
      run_one(ioc, [&](auto handler) { stream.async_handshake(ssl::stream_base::client, std::move(handler)); });
  if (!ec) return;
  if (ec == beast::error::timeout) timed_out(f);
  const long verify = SSL_get_verify_result(stream.native_handle());
  if (verify != X509_V_OK) {
    throw MediaError("the TLS certificate of " + server_name(url) +
                     " is not accepted: " + X509_verify_cert_error_string(verify));
  }
  failed(f, ec, "the TLS handshake with " + server_name(url) + " failed");
}

Hop fetch_hop(const RemoteUrl& url, const Fetch& f) {
  const std::vector<tcp::endpoint> endpoints = vetted_endpoints(url, f);
  net::io_context ioc;
  if (!url.https) {
    beast::tcp_stream stream(ioc);
    connect(stream, ioc, endpoints, url, f);
    return exchange(stream, ioc, url, f);
  }
  ssl::context context = tls_context(f.options);
  beast::ssl_stream<beast::tcp_stream> stream(ioc, context);
  expect_peer(stream.native_handle(), url);
  connect(stream, ioc, endpoints, url, f);
  handshake(stream, ioc, url, f);
  return exchange(stream, ioc, url, f);
}

// ---- redirects ------------------------------------------------------------------------------

void check_redirect(const RemoteUrl& from, const RemoteUrl& to) {
  if (to.host != from.host) {
    throw MediaError("the image URL redirects to another host ('" + to.host + "'); only redirects within '" +
                     from.host + "' are followed");
  }
  if (from.https && !to.https) throw MediaError("the image URL redirects from https to http, which is not followed");
}

std::vector<uint8_t> follow(RemoteUrl url, const Fetch& f) {
  for (int redirects = 0;; ++redirects) {
    Hop hop = fetch_hop(url, f);
    if (!hop.location) return std::move(hop.body);
    if (redirects == kMaxRedirects) {
      throw MediaError("the image URL redirects more than " + std::to_string(kMaxRedirects) + " times");
    }
    RemoteUrl next = redirect_target(url, *hop.location);
    check_redirect(url, next);
    check_allowed(next, f.options.allowed_domains);
    url = std::move(next);
  }
}

}  // namespace

std::vector<uint8_t> fetch_remote_image(std::string_view text, const HttpFetchOptions& options) {
  const Fetch f{options, Clock::now() + options.timeout};
  const RemoteUrl url = parse_remote_url(text);
  check_allowed(url, options.allowed_domains);
  try {
    return follow(url, f);
  } catch (const boost::system::system_error& e) {  // Asio's throwing calls (TLS set-up)
    throw MediaError(std::string("downloading the image failed: ") + e.what());
  } catch (const std::system_error& e) {  // no thread for the DNS lookup
    throw MediaError(std::string("downloading the image failed: ") + e.what());
  }
}

}  // namespace ds
