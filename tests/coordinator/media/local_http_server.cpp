#include "tests/coordinator/media/local_http_server.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

namespace ds::test {

namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

// ---- certificates ---------------------------------------------------------------------------

namespace {

std::string bio_text(BIO* bio) {
  BUF_MEM* memory = nullptr;
  BIO_get_mem_ptr(bio, &memory);
  std::string out(memory->data, memory->length);
  BIO_free(bio);
  return out;
}

void add_extension(X509* cert, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str());
  if (extension == nullptr || X509_add_ext(cert, extension, -1) != 1) {
    throw std::runtime_error("cannot add the certificate extension " + value);
  }
  X509_EXTENSION_free(extension);
}

}  // namespace

TlsIdentity make_self_signed(const std::string& subject_alt_name) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  if (key == nullptr || cert == nullptr) throw std::runtime_error("cannot make a test key");
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("deltaserve test"), -1,
                             -1, 0);
  X509_set_issuer_name(cert, name);
  add_extension(cert, NID_basic_constraints, "critical,CA:TRUE");
  add_extension(cert, NID_subject_alt_name, subject_alt_name);
  if (X509_sign(cert, key, EVP_sha256()) == 0) throw std::runtime_error("cannot sign the test certificate");
  TlsIdentity out;
  BIO* cert_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(cert_bio, cert);
  out.cert_pem = bio_text(cert_bio);
  BIO* key_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(key_bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  out.key_pem = bio_text(key_bio);
  X509_free(cert);
  EVP_PKEY_free(key);
  return out;
}

// ---- the server -----------------------------------------------------------------------------

struct LocalHttpServer::Impl {
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::optional<ssl::context> tls;
  Handler handler;
  std::mutex mutex;
  std::condition_variable stop_cv;
  bool stopping = false;

  bool pause(std::chrono::milliseconds duration) {
    std::unique_lock lock(mutex);
    return !stop_cv.wait_for(lock, duration, [this] { return stopping; });
  }
  bool stopped() {
    std::lock_guard lock(mutex);
    return stopping;
  }
};

namespace {

template <class Stream>
class StreamConnection : public ServerConnection {
 public:
  StreamConnection(Stream& stream, LocalHttpServer::Impl& server) : stream_(stream), server_(server) {}
  bool send(std::string_view bytes) override {
    boost::system::error_code ec;
    net::write(stream_, net::buffer(bytes.data(), bytes.size()), ec);
    return !ec;
  }
  bool pause(std::chrono::milliseconds duration) override { return server_.pause(duration); }

 private:
  Stream& stream_;
  LocalHttpServer::Impl& server_;
};

using BufferIterator = net::buffers_iterator<net::streambuf::const_buffers_type>;

// The end of a request head; or, when the first byte cannot start an HTTP method (a TLS
// ClientHello, say), everything read so far, so that the handler answers at once the way an
// HTTP server answers garbage.
std::pair<BufferIterator, bool> head_end(BufferIterator begin, BufferIterator end) {
  if (begin != end && (*begin < 'A' || *begin > 'Z')) return {end, true};
  static constexpr char kEnd[] = "\r\n\r\n";
  const BufferIterator at = std::search(begin, end, kEnd, kEnd + 4);
  if (at == end) return {begin, false};
  return {at + 4, true};
}

// Reads one request head from `stream` and runs the handler on it; false when none came. The
// target is empty when the head is not HTTP.
template <class Stream>
bool answer_one(Stream& stream, LocalHttpServer::Impl& server) {
  net::streambuf buffer;
  boost::system::error_code ec;
  const size_t n = net::read_until(stream, buffer, head_end, ec);
  if (ec) return false;
  ServerRequest request;
  request.head.assign(net::buffers_begin(buffer.data()), net::buffers_begin(buffer.data()) + static_cast<long>(n));
  const size_t space = request.head.find(' ');
  if (space != std::string::npos && request.head.find("\r\n") != std::string::npos) {
    request.target = request.head.substr(space + 1, request.head.find(' ', space + 1) - space - 1);
  }
  StreamConnection<Stream> connection(stream, server);
  server.handler(request, connection);
  return true;
}

}  // namespace

LocalHttpServer::LocalHttpServer(Handler handler, const TlsIdentity* tls) : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  if (tls != nullptr) {
    impl_->tls.emplace(ssl::context::tls_server);
    impl_->tls->use_certificate_chain(net::buffer(tls->cert_pem));
    impl_->tls->use_private_key(net::buffer(tls->key_pem), ssl::context::pem);
  }
  const tcp::endpoint at(net::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(at.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(at);
  impl_->acceptor.listen();
  thread_ = std::thread([this] {
    for (;;) {
      tcp::socket socket(impl_->ioc);
      boost::system::error_code ec;
      impl_->acceptor.accept(socket, ec);
      if (impl_->stopped()) return;
      if (ec) continue;
      if (!impl_->tls) {
        if (answer_one(socket, *impl_)) ++requests_;
        continue;
      }
      ssl::stream<tcp::socket&> stream(socket, *impl_->tls);
      stream.handshake(ssl::stream_base::server, ec);
      if (!ec && answer_one(stream, *impl_)) ++requests_;
    }
  });
}

LocalHttpServer::~LocalHttpServer() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  // accept() blocks: a connection of our own wakes it, and it sees `stopping`.
  boost::system::error_code ec;
  tcp::socket wake(impl_->ioc);
  wake.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port()), ec);
  thread_.join();
}

uint16_t LocalHttpServer::port() const {
  return impl_->acceptor.local_endpoint().port();
}

std::string LocalHttpServer::url(const std::string& path, const std::string& host) const {
  return std::string(impl_->tls ? "https://" : "http://") + host + ":" + std::to_string(port()) + path;
}

std::string http_answer(const std::string& status, const std::string& headers, std::string_view body) {
  return "HTTP/1.1 " + status + "\r\n" + headers + "Content-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + std::string(body);
}

uint16_t unused_port() {
  net::io_context ioc;
  tcp::acceptor acceptor(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  return acceptor.local_endpoint().port();
}

}  // namespace ds::test
