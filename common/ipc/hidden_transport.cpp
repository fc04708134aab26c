// Hidden-state chunk transport: shared-memory ring on one host, inline otherwise (see
// hidden_transport.h).
#include "common/ipc/hidden_transport.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "common/log.h"

namespace ds::ipc {
namespace {

constexpr const char* kRingPrefix = "/deltaserve-ring-";

uint64_t next_pow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

bool parse_hidden_transport(const std::string& text, HiddenTransport* out) {
  if (text == "auto") {
    *out = HiddenTransport::kAuto;
  } else if (text == "inline") {
    *out = HiddenTransport::kInline;
  } else {
    return false;
  }
  return true;
}

const char* hidden_transport_name(HiddenTransport t) {
  return t == HiddenTransport::kInline ? "inline" : "auto";
}

bool uses_shm_ring(HiddenTransport mode, const std::string& next_endpoint) {
  return mode == HiddenTransport::kAuto && next_endpoint.rfind("ipc://", 0) == 0;
}

SlotRef slot_ref_of(const v1::HiddenChunk& chunk) {
  return SlotRef{chunk.shm().generation(), chunk.shm().slot(), chunk.shm().sequence(), chunk.nbytes()};
}

// ---- sender -------------------------------------------------------------------------------

HiddenSender::HiddenSender(Channel& out, std::string ring_name, HiddenRingOptions options, uint64_t generation_seed,
                           RingMappingHooks hooks)
    : out_(out),
      ring_name_(std::move(ring_name)),
      options_(options),
      generation_seed_(generation_seed),
      hooks_(std::move(hooks)) {}

HiddenSender::~HiddenSender() {
  drop_ring();
}

void HiddenSender::drop_ring() {
  if (!ring_) return;
  if (hooks_.unmapping) hooks_.unmapping(ring_->base());
  ring_.reset();  // unmaps and unlinks
}

// A ring whose slots hold `nbytes`: the current one, or a bigger one once every slot of the
// current one is back (the consumer then maps the new generation). False: send inline.
bool HiddenSender::ensure_ring(uint64_t nbytes) {
  if (ring_name_.empty() || nbytes > options_.max_slot_bytes) return false;
  if (ring_ && nbytes <= ring_->geometry().slot_bytes) return true;
  if (ring_) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.wait_ms);
    while (!ring_->all_free()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    drop_ring();
  }
  ShmRingGeometry g;
  g.n_slots = options_.n_slots;
  g.slot_bytes = std::min(options_.max_slot_bytes, std::max(options_.min_slot_bytes, next_pow2(nbytes)));
  try {
    ring_ = std::make_unique<ShmRingProducer>(ring_name_, g, generation_seed_ ^ (++rings_made_ << 48));
  } catch (const ShmRingError& e) {
    ds::log::warn("ipc", ds::log::Msg() << "shared-memory ring off, hidden states travel inline: " << e.what());
    ring_name_.clear();
    return false;
  }
  if (hooks_.mapped) hooks_.mapped(ring_->base(), ring_->mapped_bytes());
  return true;
}

bool HiddenSender::send(v1::Envelope env, std::span<const uint8_t> bytes) {
  v1::HiddenChunk* chunk = env.mutable_stage_forward()->mutable_hidden();
  chunk->clear_shm();
  if (!bytes.empty() && ensure_ring(bytes.size())) {
    if (const std::optional<SlotRef> ref = ring_->write(bytes, options_.wait_ms)) {
      v1::ShmSlot* slot = chunk->mutable_shm();
      slot->set_ring(ring_->name());
      slot->set_generation(ref->generation);
      slot->set_slot(ref->slot);
      slot->set_sequence(ref->sequence);
      if (out_.send(env)) {
        ++ring_messages_;
        return true;
      }
      ring_->cancel(*ref);
      return false;
    }
    // The consumer has not handed a slot back in time (slow or dead): inline keeps going.
    chunk->clear_shm();
  }
  ++inline_messages_;
  return out_.send(env, bytes);
}

std::span<uint8_t> HiddenSender::reserve(uint64_t nbytes) {
  abandon();
  if (nbytes > 0 && ensure_ring(nbytes)) {
    reserved_slot_ = ring_->begin_write(nbytes, options_.wait_ms);
    if (reserved_slot_) return reserved_slot_->bytes;
  }
  // The consumer has not handed a slot back in time (or no ring): the bytes go inline.
  fallback_.resize(nbytes);
  reserved_inline_bytes_ = nbytes;
  return {fallback_.data(), fallback_.size()};
}

std::optional<ReadyWord> HiddenSender::reserved_ready() const {
  if (!reserved_slot_) return std::nullopt;
  return reserved_slot_->ready;
}

bool HiddenSender::send_reserved(v1::Envelope env, bool lands_later) {
  v1::HiddenChunk* chunk = env.mutable_stage_forward()->mutable_hidden();
  chunk->clear_shm();
  if (lands_later && !reserved_slot_) throw std::logic_error("HiddenSender: only a ring slot's bytes may land later");
  if (reserved_slot_) {
    const SlotRef ref = reserved_slot_->ref;
    reserved_slot_.reset();
    ring_->finish_write(ref);
    v1::ShmSlot* slot = chunk->mutable_shm();
    slot->set_ring(ring_->name());
    slot->set_generation(ref.generation);
    slot->set_slot(ref.slot);
    slot->set_sequence(ref.sequence);
    slot->set_lands_later(lands_later);
    if (out_.send(env)) {
      ++ring_messages_;
      return true;
    }
    ring_->cancel(ref);
    return false;
  }
  if (!reserved_inline_bytes_) throw std::logic_error("HiddenSender::send_reserved without a reservation");
  reserved_inline_bytes_.reset();
  ++inline_messages_;
  return out_.send(env, fallback_);
}

void HiddenSender::abandon() {
  if (reserved_slot_ && ring_) ring_->abort_write(reserved_slot_->ref);
  reserved_slot_.reset();
  reserved_inline_bytes_.reset();
}

void HiddenSender::restart() {
  abandon();
  drop_ring();
}

// ---- receiver -----------------------------------------------------------------------------

HiddenReceiver::HiddenReceiver(RingMappingHooks hooks) : hooks_(std::move(hooks)) {}

HiddenReceiver::~HiddenReceiver() {
  if (ring_ && hooks_.unmapping) hooks_.unmapping(ring_->base());
}

void HiddenReceiver::map_ring(const std::string& name) {
  if (name.rfind(kRingPrefix, 0) != 0 || name.find('/', 1) != std::string::npos) {
    throw ShmRingError("descriptor names '" + name + "', not a deltaserve ring");
  }
  auto fresh = std::make_unique<ShmRingConsumer>(name);
  // Mapped: the name has served its purpose. Unlinking it now means a SIGKILLed producer and
  // consumer leave nothing in /dev/shm; a recreated ring gets the name again.
  unlink_shm_ring(name);
  if (ring_ && hooks_.unmapping) hooks_.unmapping(ring_->base());
  ring_ = std::move(fresh);
  if (hooks_.mapped) hooks_.mapped(ring_->base(), ring_->mapped_bytes());
}

std::span<const uint8_t> HiddenReceiver::resolve(const v1::HiddenChunk& chunk, const std::vector<uint8_t>& bulk) {
  if (!chunk.has_shm()) {
    if (chunk.nbytes() != bulk.size()) {
      throw ShmRingError("hidden chunk says " + std::to_string(chunk.nbytes()) + " bytes, bulk frame has " +
                         std::to_string(bulk.size()));
    }
    return bulk;
  }
  if (!bulk.empty()) throw ShmRingError("hidden chunk names a ring slot and carries a bulk frame");
  const SlotRef ref = slot_ref_of(chunk);
  // A new name or generation: the producer restarted or grew its ring.
  if (!ring_ || ring_->name() != chunk.shm().ring() || ring_->generation() != ref.generation) {
    try {
      map_ring(chunk.shm().ring());
    } catch (const ShmRingError& e) {
      if (!ring_ || ring_->name() != chunk.shm().ring()) throw;
      throw ShmRingError("descriptor of generation " + std::to_string(ref.generation) + " of ring " + ring_->name() +
                         ", which is mapped at generation " + std::to_string(ring_->generation()) +
                         " and has no newer one (stale): " + e.what());
    }
  }
  return ring_->view(ref);
}

std::optional<HiddenReceiver::Landing> HiddenReceiver::landing(const v1::HiddenChunk& chunk) const {
  if (!chunk.has_shm() || !chunk.shm().lands_later()) return std::nullopt;
  if (!ring_ || ring_->name() != chunk.shm().ring()) throw ShmRingError("landing() of a chunk not resolved first");
  return Landing{ring_->ready_word(slot_ref_of(chunk)), ring_->producer_pid()};
}

bool HiddenReceiver::release(const v1::HiddenChunk& chunk) {
  if (!chunk.has_shm()) return true;
  if (!ring_ || ring_->name() != chunk.shm().ring()) return false;
  return ring_->release(slot_ref_of(chunk));
}

}  // namespace ds::ipc
