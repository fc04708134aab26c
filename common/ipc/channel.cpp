// ZeroMQ implementation of the Channel interface (see channel.h).
#include "common/ipc/channel.h"

#include <cerrno>
#include <chrono>
#include <stdexcept>

namespace ds::ipc {
namespace {

zmq::socket_type zmq_type(SocketRole role) {
  switch (role) {
    case SocketRole::kRouter:
      return zmq::socket_type::router;
    case SocketRole::kDealer:
      return zmq::socket_type::dealer;
    case SocketRole::kPush:
      return zmq::socket_type::push;
    case SocketRole::kPull:
      return zmq::socket_type::pull;
  }
  return zmq::socket_type::pair;
}

// zmq::poll that treats a signal interruption (EINTR) as a timeout: the caller's loop then
// sees its stop flag.
size_t poll_items(zmq::pollitem_t* items, size_t n, int timeout_ms) {
  try {
    return zmq::poll(items, n, std::chrono::milliseconds(timeout_ms));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return 0;
    throw;
  }
}

bool binds(SocketRole role) {
  return role == SocketRole::kRouter || role == SocketRole::kPull;
}

// Reads every remaining frame of the current multipart message.
std::vector<zmq::message_t> read_frames(zmq::socket_t& sock) {
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t frame;
    try {
      if (!sock.recv(frame, zmq::recv_flags::dontwait)) break;
    } catch (const zmq::error_t&) {
      break;  // only a blocking wait sees EINTR; parts of a message arrive together
    }
    frames.push_back(std::move(frame));
  } while (frames.back().more());
  return frames;
}

}  // namespace

ZmqChannel::ZmqChannel(Context& ctx, SocketRole role, const std::string& endpoint)
    : role_(role), sock_(ctx, zmq_type(role)) {
  // Never block process exit on unsent messages: a dead peer must not hang shutdown.
  sock_.set(zmq::sockopt::linger, 0);
  if (role == SocketRole::kRouter) {
    // Sending to an unknown routing id fails instead of being silently dropped.
    sock_.set(zmq::sockopt::router_mandatory, 1);
  }
  // Reconnect quickly after a peer restarts (default backs off up to 100 ms anyway).
  sock_.set(zmq::sockopt::reconnect_ivl, 50);
  try {
    if (binds(role)) {
      sock_.bind(endpoint);
      endpoint_ = sock_.get(zmq::sockopt::last_endpoint);
    } else {
      sock_.connect(endpoint);
      endpoint_ = endpoint;
    }
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(std::string(binds(role) ? "bind " : "connect ") + endpoint + ": " + e.what());
  }
}

ZmqChannel::~ZmqChannel() = default;

std::string ZmqChannel::endpoint() const {
  return endpoint_;
}

bool ZmqChannel::send(const v1::Envelope& env, std::span<const uint8_t> bulk, const std::string& peer) {
  std::vector<std::string> frames;
  if (role_ == SocketRole::kRouter) frames.push_back(peer);
  frames.push_back(encode_envelope(env));
  if (!bulk.empty()) frames.emplace_back(reinterpret_cast<const char*>(bulk.data()), bulk.size());
  return send_raw(frames);
}

bool ZmqChannel::send_raw(const std::vector<std::string>& frames) {
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      const bool last = i + 1 == frames.size();
      auto flags = zmq::send_flags::dontwait | (last ? zmq::send_flags::none : zmq::send_flags::sndmore);
      if (!sock_.send(zmq::buffer(frames[i]), flags)) return false;  // queue full (EAGAIN)
    }
  } catch (const zmq::error_t&) {
    return false;  // EHOSTUNREACH: the ROUTER peer is gone
  }
  return true;
}

RecvStatus ZmqChannel::recv(Received* out, int timeout_ms, std::string* why) {
  zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
  if (poll_items(&item, 1, timeout_ms) == 0) return RecvStatus::kTimeout;
  std::vector<zmq::message_t> frames = read_frames(sock_);
  if (frames.empty()) return RecvStatus::kTimeout;
  size_t first = 0;
  out->peer.clear();
  if (role_ == SocketRole::kRouter) {
    out->peer = frames[0].to_string();
    first = 1;
  }
  const size_t n_body = frames.size() - first;
  if (n_body < 1 || n_body > 2) {
    *why = "message with " + std::to_string(n_body) + " frames (expected 1 or 2)";
    return RecvStatus::kRejected;
  }
  if (!decode_envelope(frames[first].data(), frames[first].size(), &out->env, why)) {
    return RecvStatus::kRejected;
  }
  out->bulk.clear();
  if (n_body == 2) {
    const auto* p = frames[first + 1].data<uint8_t>();
    out->bulk.assign(p, p + frames[first + 1].size());
  }
  return RecvStatus::kMessage;
}

int poll_channels(const std::vector<ZmqChannel*>& channels, int timeout_ms, int spin_us) {
  std::vector<zmq::pollitem_t> items;
  for (ZmqChannel* c : channels) items.push_back({c->socket().handle(), 0, ZMQ_POLLIN, 0});
  const auto start = std::chrono::steady_clock::now();
  bool ready = false;
  while (!ready && std::chrono::steady_clock::now() - start < std::chrono::microseconds(spin_us)) {
    ready = poll_items(items.data(), items.size(), 0) != 0;
  }
  if (!ready) {
    const auto spun = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    const int left = timeout_ms - static_cast<int>(spun.count());
    if (left < 0 || poll_items(items.data(), items.size(), left) == 0) return -1;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].revents & ZMQ_POLLIN) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace ds::ipc
