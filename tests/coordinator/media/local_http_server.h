// A tiny HTTP (or HTTPS) server on 127.0.0.1 for the download tests. One thread accepts the
// connections one at a time, reads each request's head and hands it to the test's handler,
// which writes whatever bytes its case needs: a proper answer, a lie, a trickle, nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

namespace ds::test {

// A certificate and its key, PEM.
struct TlsIdentity {
  std::string cert_pem;
  std::string key_pem;
};

// A self-signed P-256 certificate, valid from an hour ago to an hour from now, whose subject
// alternative name is `subject_alt_name` ("IP:127.0.0.1", "DNS:other.example").
TlsIdentity make_self_signed(const std::string& subject_alt_name);

struct ServerRequest {
  std::string target;  // "/image.png"
  std::string head;    // the request line and headers
};

// The handler's view of one connection.
class ServerConnection {
 public:
  virtual ~ServerConnection() = default;
  // Writes all of `bytes`; false once the client is gone.
  virtual bool send(std::string_view bytes) = 0;
  // Waits `duration`, or less when the server stops; false when it stopped.
  virtual bool pause(std::chrono::milliseconds duration) = 0;
};

class LocalHttpServer {
 public:
  using Handler = std::function<void(const ServerRequest&, ServerConnection&)>;

  // Listening on 127.0.0.1 at an ephemeral port once constructed; TLS with `tls` when given.
  explicit LocalHttpServer(Handler handler, const TlsIdentity* tls = nullptr);
  ~LocalHttpServer();
  LocalHttpServer(const LocalHttpServer&) = delete;
  LocalHttpServer& operator=(const LocalHttpServer&) = delete;

  uint16_t port() const;
  // "http[s]://<host>:<port><path>".
  std::string url(const std::string& path, const std::string& host = "127.0.0.1") const;
  // Requests whose head was read so far.
  int requests() const { return requests_.load(); }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<int> requests_{0};
  std::thread thread_;
};

// "HTTP/1.1 <status>\r\n<headers>Content-Length: <n>\r\nConnection: close\r\n\r\n<body>"; each
// header in `headers` ends in "\r\n".
std::string http_answer(const std::string& status, const std::string& headers, std::string_view body);

// A port on 127.0.0.1 nothing listens on (bound, then closed).
uint16_t unused_port();

}  // namespace ds::test
