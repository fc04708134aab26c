// Message transport between deltaserve processes: framed protobuf envelopes plus optional
// bulk bytes (hidden states, full logits). Code above this interface never sees ZeroMQ, so a
// shared-memory ring for the bulk bytes can replace the inline frame later.
//
// Wire format of one message (ZeroMQ multipart): [envelope][bulk]? — on a ROUTER socket a
// routing-id frame comes first. Anything else is rejected by recv() with a reason.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>  // cppzmq: context_t, socket_t, message_t, poll

#include "common/ipc/protocol.h"

namespace ds::ipc {

// One received message.
struct Received {
  std::string peer;           // routing id of the sender (ROUTER sockets only)
  v1::Envelope env;           // decoded, version-checked envelope
  std::vector<uint8_t> bulk;  // bulk bytes that followed the envelope (may be empty)
};

enum class RecvStatus {
  kMessage,   // `out` holds a message
  kTimeout,   // nothing arrived in time
  kRejected,  // a malformed or wrong-version frame was read and discarded (`why` says why)
};

class Channel {
 public:
  virtual ~Channel() = default;
  // Queues one message without blocking. `peer` addresses a ROUTER peer (ignored otherwise).
  // Returns false when it cannot be queued (unknown peer, queue full).
  virtual bool send(const v1::Envelope& env, std::span<const uint8_t> bulk = {}, const std::string& peer = {}) = 0;
  // Receives one message, waiting up to timeout_ms (0 = do not wait, -1 = forever).
  virtual RecvStatus recv(Received* out, int timeout_ms, std::string* why) = 0;
};

enum class SocketRole {
  kRouter,  // coordinator control socket: binds, talks to many workers
  kDealer,  // worker control socket: connects to the coordinator
  kPush,    // stage k -> stage k+1 data: connects
  kPull,    // stage k+1 data input: binds
};

// Process-wide ZeroMQ context (one per process; owns the I/O thread).
using Context = zmq::context_t;

// A Channel over one ZeroMQ socket; `ipc://` on one host, `tcp://` across hosts.
class ZmqChannel : public Channel {
 public:
  // Binds (ROUTER, PULL) or connects (DEALER, PUSH) to `endpoint`. Throws std::runtime_error
  // naming the endpoint when that fails.
  ZmqChannel(Context& ctx, SocketRole role, const std::string& endpoint);
  ~ZmqChannel() override;
  ZmqChannel(const ZmqChannel&) = delete;
  ZmqChannel& operator=(const ZmqChannel&) = delete;

  bool send(const v1::Envelope& env, std::span<const uint8_t> bulk = {}, const std::string& peer = {}) override;
  RecvStatus recv(Received* out, int timeout_ms, std::string* why) override;
  // Sends raw frames as they are (tests use it to inject malformed input).
  bool send_raw(const std::vector<std::string>& frames);
  // The endpoint actually bound or connected (resolves tcp wildcard ports).
  std::string endpoint() const;
  zmq::socket_t& socket() { return sock_; }

 private:
  SocketRole role_;
  zmq::socket_t sock_;
  std::string endpoint_;
};

// Waits until one of `channels` is readable; returns its index, or -1 on timeout. The first
// `spin_us` microseconds of the wait poll without sleeping (busy polling): a thread that blocks
// pays a wake-up when the message comes (tens to hundreds of microseconds on a virtual machine),
// once per hop of every step.
int poll_channels(const std::vector<ZmqChannel*>& channels, int timeout_ms, int spin_us = 0);

}  // namespace ds::ipc
