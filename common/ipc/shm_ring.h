// A POSIX shared-memory ring of fixed-size slots for bulk bytes (hidden states) between two
// processes on one host: stage k (the producer) writes a chunk into a slot and sends only a
// small descriptor (SlotRef) over ZeroMQ; stage k+1 (the consumer) reads the slot in place and
// hands it back.
//
// Layout of the shm object: a header page (magic, geometry, generation), one SlotHeader per
// slot, then the slots' bytes, each page-aligned (so the consumer can read floats in place and
// a CUDA worker can register the whole mapping as pinned memory).
//
// Slot ownership lives in the slot header as one atomic word, so no return message is needed:
//   0          free: the producer may take it
//   kWriting   the producer is filling it
//   S > 0      holds the producer's message number S, ready for the consumer
// The consumer hands a slot back with compare-and-swap S -> 0, which only succeeds while the
// slot still holds *its* message; message numbers are never reused within a ring, and every
// ring gets a fresh random generation, so a stale or overwritten slot is always detected.
//
// Slots are taken round-robin and the consumer reads them in order, so waiting for the next
// slot to become free is the back-pressure; the wait is bounded (the caller then falls back to
// the inline path), so a dead consumer can never deadlock the producer.
//
// The name only serves the consumer's first open: it unlinks the name once mapped, so a
// SIGKILLed pair leaves nothing behind in /dev/shm (the memory goes with the last mapping).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/host_signal.h"

namespace ds::ipc {

// A bad descriptor, a stale or torn slot, or a ring that cannot be created / mapped.
class ShmRingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What travels in the message instead of the bytes (mirrors deltaserve.v1.ShmSlot).
struct SlotRef {
  uint64_t generation = 0;  // the ring's creation nonce
  uint32_t slot = 0;        // slot index
  uint64_t sequence = 0;    // the producer's message number (> 0)
  uint64_t nbytes = 0;      // bytes used in the slot
};

// A slot's ready word, for writes that land after their descriptor is sent (a GPU stage sends
// the descriptor as soon as its work is queued, and its stream writes `value` into `word` once
// the bytes are in the slot). Lives in the shared mapping, so it can be pinned and written or
// waited on by a device. `value` never is 0, the word's reset state.
using ReadyWord = HostSignal;

// The ready value of message `sequence` (unique among the values a slot takes in turn).
uint32_t ready_value(uint64_t sequence);

struct ShmRingGeometry {
  uint32_t n_slots = 4;     // at least 2: the producer fills one while the consumer reads another
  uint64_t slot_bytes = 0;  // capacity of each slot
};

// The shm name of the ring feeding the stage whose data endpoint is `data_endpoint`: unique
// per run (the endpoint lives in the run's private directory) and per stage pair.
std::string shm_ring_name(const std::string& data_endpoint);

// Removes a ring by name (no-op when absent): the coordinator clears leftovers at shutdown.
void unlink_shm_ring(const std::string& name);

// What both ends hold: the ring's name, geometry and generation and their own mapping of it
// (unmapped on destruction).
class ShmRingMapping {
 public:
  ShmRingMapping(const ShmRingMapping&) = delete;
  ShmRingMapping& operator=(const ShmRingMapping&) = delete;

  const std::string& name() const { return name_; }
  uint64_t generation() const { return generation_; }
  const ShmRingGeometry& geometry() const { return geometry_; }
  // The whole mapping (e.g. for cudaHostRegister).
  void* base() const { return base_; }
  size_t mapped_bytes() const { return size_; }

 protected:
  explicit ShmRingMapping(std::string name, ShmRingGeometry geometry = {}, uint64_t generation = 0)
      : name_(std::move(name)), geometry_(geometry), generation_(generation) {}
  ~ShmRingMapping();

  std::string name_;
  ShmRingGeometry geometry_;
  uint64_t generation_ = 0;
  void* base_ = nullptr;
  size_t size_ = 0;
};

class ShmRingProducer : public ShmRingMapping {
 public:
  // Creates the ring `name`, first unlinking any object of that name a crashed producer left.
  // Memory is reserved up front (posix_fallocate), so a full /dev/shm is an error here rather
  // than a SIGBUS later. Throws ShmRingError.
  ShmRingProducer(const std::string& name, ShmRingGeometry geometry, uint64_t generation);
  ~ShmRingProducer();  // unmaps and unlinks
  ShmRingProducer(const ShmRingProducer&) = delete;
  ShmRingProducer& operator=(const ShmRingProducer&) = delete;

  // Copies `bytes` into the next slot, waiting up to timeout_ms for it to be handed back.
  // nullopt when it stays busy (ring full) or the bytes exceed a slot.
  std::optional<SlotRef> write(std::span<const uint8_t> bytes, int timeout_ms);

  // The same in two halves, so the producer can fill the slot in place (e.g. a device-to-host
  // copy straight into it, no staging copy): begin_write takes the next slot (nullopt as for
  // write) and returns where `nbytes` go; finish_write publishes it to the consumer; abort_write
  // hands it back unpublished. One write may be open at a time.
  // `ready` is reset to "not landed": a writer that publishes before its bytes are in place
  // (descriptor flag lands_later) sets it once they are.
  struct OpenWrite {
    SlotRef ref;
    std::span<uint8_t> bytes;
    ReadyWord ready;
  };
  std::optional<OpenWrite> begin_write(uint64_t nbytes, int timeout_ms);
  void finish_write(const SlotRef& ref);
  void abort_write(const SlotRef& ref);
  // Takes back a slot whose descriptor could not be sent (no-op once the consumer has it).
  void cancel(const SlotRef& ref);
  // Whether every slot is free (the ring may then be replaced by a bigger one).
  bool all_free() const;

 private:
  uint64_t next_sequence_ = 1;
};

class ShmRingConsumer : public ShmRingMapping {
 public:
  // Maps the existing ring `name` and checks its header. Throws ShmRingError.
  explicit ShmRingConsumer(const std::string& name);
  ShmRingConsumer(const ShmRingConsumer&) = delete;
  ShmRingConsumer& operator=(const ShmRingConsumer&) = delete;

  // The bytes `ref` names, read in place (page-aligned). Throws ShmRingError when the
  // descriptor does not fit this ring (generation, slot range, size) or the slot does not hold
  // its message (stale or already handed back).
  std::span<const uint8_t> view(const SlotRef& ref) const;
  // The slot's ready word for ref's message (a descriptor view() accepted).
  ReadyWord ready_word(const SlotRef& ref) const;
  // The process that created the ring (and fills its slots).
  int64_t producer_pid() const;
  // Hands the slot back. False when it no longer held ref's message (handed back by someone
  // else and overwritten while being read), so what was read must be discarded.
  bool release(const SlotRef& ref);
};

}  // namespace ds::ipc
