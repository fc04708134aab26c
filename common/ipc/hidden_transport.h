// The path of hidden-state chunks from stage k to stage k+1 (issue 12). Same host (ipc://
// data endpoint): the bytes go through a shared-memory ring (shm_ring.h) and the StageForward
// carries only a ShmSlot descriptor. Across hosts (tcp://), when forced inline, or whenever the
// ring cannot take a chunk (too big, full for too long, /dev/shm exhausted): the bytes travel
// inline as the message's bulk frame, exactly as before. The receiver accepts either form, so
// the choice is the sender's alone and may differ from chunk to chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/ipc/channel.h"
#include "common/ipc/shm_ring.h"

namespace ds::ipc {

enum class HiddenTransport {
  kAuto,    // ring when the next stage's data endpoint is ipc://, inline otherwise
  kInline,  // always inline (debugging, comparisons)
};

// Parses "auto" | "inline". False for anything else.
bool parse_hidden_transport(const std::string& text, HiddenTransport* out);
const char* hidden_transport_name(HiddenTransport t);

// Whether chunks to `next_endpoint` go through a ring under `mode`.
bool uses_shm_ring(HiddenTransport mode, const std::string& next_endpoint);

struct HiddenRingOptions {
  uint32_t n_slots = 4;                         // >= 2: stage k fills one while stage k+1 reads another
  uint64_t min_slot_bytes = uint64_t{1} << 20;  // first ring's slot size; grows (x2) to fit bigger chunks
  uint64_t max_slot_bytes = uint64_t{1} << 30;  // chunks above this go inline
  int wait_ms = 2000;                           // longest wait for a free slot before sending inline
};

// Called with each mapping a ring gets / loses (a CUDA worker registers it as pinned memory).
struct RingMappingHooks {
  std::function<void(void* base, size_t bytes)> mapped;
  std::function<void(void* base)> unmapping;
};

class HiddenSender {
 public:
  // `ring_name` empty: always inline. `generation_seed` should differ per process start.
  HiddenSender(Channel& out, std::string ring_name, HiddenRingOptions options, uint64_t generation_seed,
               RingMappingHooks hooks = {});
  ~HiddenSender();
  // Sends `env` (a stage_forward whose hidden chunk describes `bytes`: dtype, shape, nbytes).
  // Returns the channel's verdict (false: not queued).
  bool send(v1::Envelope env, std::span<const uint8_t> bytes);
  // The same without the staging copy: reserve(n) returns where the chunk's n bytes go (a ring
  // slot when one is free in time, else a buffer of the sender's, 16-byte aligned either way);
  // the caller fills them, then send_reserved(env) sends (the slot's descriptor, or the bytes
  // inline) or abandon() drops them. One reservation at a time; a new one abandons the last.
  std::span<uint8_t> reserve(uint64_t nbytes);
  // The open reservation's ready word: set, the bytes may land after send_reserved (whoever
  // fills them then sets the word). None for an inline reservation, whose bytes must be in place.
  std::optional<ReadyWord> reserved_ready() const;
  // `lands_later`: the bytes are not in place yet (only with reserved_ready()); the receiver
  // waits for the ready word.
  bool send_reserved(v1::Envelope env, bool lands_later = false);
  void abandon();
  // Drops the ring; the next chunk goes through a fresh one (new generation). Call after a
  // recovery: a restarted next stage never hands back the slots its predecessor held, and
  // older descriptors become stale.
  void restart();

  uint64_t ring_messages() const { return ring_messages_; }
  uint64_t inline_messages() const { return inline_messages_; }

 private:
  bool ensure_ring(uint64_t nbytes);
  void drop_ring();

  Channel& out_;
  std::string ring_name_;  // empty once the ring is off for good (e.g. /dev/shm full)
  HiddenRingOptions options_;
  uint64_t generation_seed_;
  uint64_t rings_made_ = 0;
  RingMappingHooks hooks_;
  std::unique_ptr<ShmRingProducer> ring_;
  // The open reservation: a ring slot being filled, or `fallback_` (inline) when none was free.
  std::optional<ShmRingProducer::OpenWrite> reserved_slot_;
  std::vector<uint8_t> fallback_;
  std::optional<uint64_t> reserved_inline_bytes_;
  uint64_t ring_messages_ = 0;
  uint64_t inline_messages_ = 0;
};

class HiddenReceiver {
 public:
  explicit HiddenReceiver(RingMappingHooks hooks = {});
  ~HiddenReceiver();
  // The chunk's bytes: the bulk frame, or the ring slot it names, read in place (valid until
  // release()). Throws ShmRingError for a bad descriptor or a stale / torn slot.
  std::span<const uint8_t> resolve(const v1::HiddenChunk& chunk, const std::vector<uint8_t>& bulk);
  // Hands the chunk's slot back (true for inline chunks). False when the slot no longer held
  // the chunk — what was read from it must not be used.
  bool release(const v1::HiddenChunk& chunk);
  // For a chunk whose bytes land later (ShmSlot.lands_later): the word to wait on before reading
  // them, and the producer to watch meanwhile. None when the bytes are already in place.
  struct Landing {
    ReadyWord ready;
    int64_t producer_pid = 0;
  };
  std::optional<Landing> landing(const v1::HiddenChunk& chunk) const;

 private:
  void map_ring(const std::string& name);
  RingMappingHooks hooks_;
  std::unique_ptr<ShmRingConsumer> ring_;
};

SlotRef slot_ref_of(const v1::HiddenChunk& chunk);

}  // namespace ds::ipc
