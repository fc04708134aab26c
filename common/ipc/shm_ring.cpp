// POSIX shared-memory ring (see shm_ring.h).
#include "common/ipc/shm_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

namespace ds::ipc {
namespace {

constexpr uint64_t kMagic = 0x31304e4952534400ull;  // "\0DSRING01" little-endian-ish tag
constexpr uint32_t kVersion = 2;                    // 2: per-slot ready word, producer pid
constexpr uint64_t kPage = 4096;
constexpr uint32_t kMaxSlots = 1024;
constexpr uint64_t kMaxSlotBytes = uint64_t{1} << 36;  // 64 GiB: far above any hidden chunk
constexpr uint64_t kWriting = ~uint64_t{0};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "slot ownership needs a lock-free 64-bit atomic");

struct RingHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t n_slots;
  uint64_t slot_bytes;
  uint64_t slot_stride;
  uint64_t data_offset;
  uint64_t generation;
  int64_t producer_pid;               // who fills the slots (a consumer waiting on a ready word checks it is alive)
  std::atomic<uint64_t> initialized;  // set last by the producer: the header above is complete
};

// One cache line per slot so the two processes do not false-share ownership words.
struct alignas(64) SlotHeader {
  std::atomic<uint64_t> state;  // 0 free, kWriting, or the message number it holds
  uint64_t sequence;            // the message number written (kept for diagnostics)
  uint64_t nbytes;              // bytes used
  // Deferred writes (OpenWrite::ready): 0 while the bytes may still be landing, ready_value(sequence)
  // once they are in place. Written by the producer's device or host, read by the consumer's.
  std::atomic<uint32_t> ready;
};

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a device writes the ready word as a plain u32");

uint64_t round_up(uint64_t v, uint64_t to) {
  return (v + to - 1) / to * to;
}

struct Layout {
  uint64_t slot_stride = 0;
  uint64_t data_offset = 0;
  uint64_t total = 0;
};

Layout layout_of(const ShmRingGeometry& g) {
  if (g.n_slots < 2 || g.n_slots > kMaxSlots) {
    throw ShmRingError("shm ring needs 2.." + std::to_string(kMaxSlots) + " slots, got " + std::to_string(g.n_slots));
  }
  if (g.slot_bytes == 0 || g.slot_bytes > kMaxSlotBytes) {
    throw ShmRingError("shm ring slot size " + std::to_string(g.slot_bytes) + " out of range");
  }
  Layout l;
  l.slot_stride = round_up(g.slot_bytes, kPage);
  l.data_offset = round_up(kPage + uint64_t{g.n_slots} * sizeof(SlotHeader), kPage);
  l.total = l.data_offset + uint64_t{g.n_slots} * l.slot_stride;
  return l;
}

std::string errno_text(const std::string& what, const std::string& name) {
  return what + " " + name + ": " + std::strerror(errno);
}

RingHeader* header_of(void* base) {
  return static_cast<RingHeader*>(base);
}

SlotHeader* slot_of(void* base, uint32_t i) {
  return reinterpret_cast<SlotHeader*>(static_cast<uint8_t*>(base) + kPage) + i;
}

uint8_t* data_of(void* base, const Layout& l, uint32_t i) {
  return static_cast<uint8_t*>(base) + l.data_offset + uint64_t{i} * l.slot_stride;
}

void* map_fd(int fd, size_t size, const std::string& name) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw ShmRingError(errno_text("mmap of shm ring", name));
  return p;
}

// Short spins first (the consumer usually hands a slot back within microseconds of reading
// it), then sleeps that grow to 1 ms so a long wait costs no CPU.
void backoff(int attempt) {
  if (attempt < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 20 * (attempt - 63))));
  }
}

}  // namespace

uint32_t ready_value(uint64_t sequence) {
  return static_cast<uint32_t>(sequence) | 0x80000000u;
}

std::string shm_ring_name(const std::string& data_endpoint) {
  // FNV-1a 64: short, stable, and shm names may not contain '/' beyond the leading one.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : data_endpoint) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[40];
  std::snprintf(buf, sizeof(buf), "/deltaserve-ring-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void unlink_shm_ring(const std::string& name) {
  shm_unlink(name.c_str());
}

// ---- producer -----------------------------------------------------------------------------

ShmRingMapping::~ShmRingMapping() {
  if (base_ != nullptr) munmap(base_, size_);
}

ShmRingProducer::ShmRingProducer(const std::string& name, ShmRingGeometry geometry, uint64_t generation)
    : ShmRingMapping(name, geometry, generation == 0 ? 1 : generation) {
  const Layout l = layout_of(geometry_);
  shm_unlink(name_.c_str());  // a crashed producer's ring: its consumer keeps its own mapping
  const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw ShmRingError(errno_text("shm_open (create)", name_));
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(l.total));
  if (rc != 0) {
    close(fd);
    shm_unlink(name_.c_str());
    throw ShmRingError("cannot reserve " + std::to_string(l.total) + " bytes for shm ring " + name_ + ": " +
                       std::strerror(rc));
  }
  try {
    base_ = map_fd(fd, l.total, name_);
  } catch (...) {
    close(fd);
    shm_unlink(name_.c_str());
    throw;
  }
  close(fd);
  size_ = l.total;
  RingHeader* h = header_of(base_);
  h->magic = kMagic;
  h->version = kVersion;
  h->n_slots = geometry_.n_slots;
  h->slot_bytes = geometry_.slot_bytes;
  h->slot_stride = l.slot_stride;
  h->data_offset = l.data_offset;
  h->generation = generation_;
  h->producer_pid = static_cast<int64_t>(getpid());
  for (uint32_t i = 0; i < geometry_.n_slots; ++i) {
    SlotHeader* s = new (slot_of(base_, i)) SlotHeader{};
    s->state.store(0, std::memory_order_relaxed);
    s->ready.store(0, std::memory_order_relaxed);
  }
  new (&h->initialized) std::atomic<uint64_t>(0);
  h->initialized.store(1, std::memory_order_release);
}

ShmRingProducer::~ShmRingProducer() {
  shm_unlink(name_.c_str());
}

std::optional<ShmRingProducer::OpenWrite> ShmRingProducer::begin_write(uint64_t nbytes, int timeout_ms) {
  if (nbytes > geometry_.slot_bytes) return std::nullopt;
  const Layout l = layout_of(geometry_);
  const uint64_t seq = next_sequence_;
  const uint32_t slot = static_cast<uint32_t>((seq - 1) % geometry_.n_slots);
  SlotHeader* s = slot_of(base_, slot);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  uint64_t expected = 0;
  for (int attempt = 0; !s->state.compare_exchange_strong(expected, kWriting, std::memory_order_acquire); ++attempt) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    backoff(attempt);
    expected = 0;
  }
  ++next_sequence_;  // even if aborted: message numbers are never reused
  // The slot was handed back, so the consumer is done waiting on its previous ready value.
  s->ready.store(0, std::memory_order_relaxed);
  return OpenWrite{SlotRef{generation_, slot, seq, nbytes},
                   {data_of(base_, l, slot), static_cast<size_t>(nbytes)},
                   ReadyWord{reinterpret_cast<uint32_t*>(&s->ready), ready_value(seq)}};
}

void ShmRingProducer::finish_write(const SlotRef& ref) {
  SlotHeader* s = slot_of(base_, ref.slot);
  s->sequence = ref.sequence;
  s->nbytes = ref.nbytes;
  s->state.store(ref.sequence, std::memory_order_release);  // publishes the bytes to the consumer
}

void ShmRingProducer::abort_write(const SlotRef& ref) {
  if (ref.generation != generation_ || ref.slot >= geometry_.n_slots) return;
  uint64_t expected = kWriting;
  slot_of(base_, ref.slot)->state.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
}

std::optional<SlotRef> ShmRingProducer::write(std::span<const uint8_t> bytes, int timeout_ms) {
  const std::optional<OpenWrite> w = begin_write(bytes.size(), timeout_ms);
  if (!w) return std::nullopt;
  if (!bytes.empty()) std::memcpy(w->bytes.data(), bytes.data(), bytes.size());
  finish_write(w->ref);
  return w->ref;
}

void ShmRingProducer::cancel(const SlotRef& ref) {
  if (ref.generation != generation_ || ref.slot >= geometry_.n_slots) return;
  uint64_t expected = ref.sequence;
  slot_of(base_, ref.slot)->state.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
}

bool ShmRingProducer::all_free() const {
  for (uint32_t i = 0; i < geometry_.n_slots; ++i) {
    if (slot_of(base_, i)->state.load(std::memory_order_acquire) != 0) return false;
  }
  return true;
}

// ---- consumer -----------------------------------------------------------------------------

ShmRingConsumer::ShmRingConsumer(const std::string& name) : ShmRingMapping(name) {
  const int fd = shm_open(name_.c_str(), O_RDWR, 0);
  if (fd < 0) throw ShmRingError(errno_text("shm_open", name_));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < kPage) {
    close(fd);
    throw ShmRingError("shm ring " + name_ + " is too small to hold a header");
  }
  size_ = static_cast<size_t>(st.st_size);
  try {
    base_ = map_fd(fd, size_, name_);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  const RingHeader* h = header_of(base_);
  std::string bad;
  if (h->magic != kMagic || h->version != kVersion) {
    bad = "bad magic or version";
  } else if (h->initialized.load(std::memory_order_acquire) != 1) {
    bad = "not initialized yet";
  } else {
    geometry_ = ShmRingGeometry{h->n_slots, h->slot_bytes};
    try {
      const Layout l = layout_of(geometry_);
      if (l.slot_stride != h->slot_stride || l.data_offset != h->data_offset || l.total != size_) {
        bad = "header geometry does not match the object's size";
      }
    } catch (const ShmRingError& e) {
      bad = e.what();
    }
  }
  if (!bad.empty()) {
    munmap(base_, size_);
    base_ = nullptr;
    throw ShmRingError("shm ring " + name_ + ": " + bad);
  }
  generation_ = h->generation;
}

std::span<const uint8_t> ShmRingConsumer::view(const SlotRef& ref) const {
  // Built only for an error: view() runs once per hidden chunk.
  const auto where = [&] { return "shm ring " + name_ + " slot " + std::to_string(ref.slot) + ": "; };
  if (ref.generation != generation_) {
    throw ShmRingError(where() + "descriptor of ring generation " + std::to_string(ref.generation) +
                       ", the mapped ring is generation " + std::to_string(generation_) + " (stale)");
  }
  if (ref.slot >= geometry_.n_slots) {
    throw ShmRingError(where() + "out of range (ring has " + std::to_string(geometry_.n_slots) + " slots)");
  }
  if (ref.sequence == 0 || ref.sequence == kWriting) throw ShmRingError(where() + "invalid message number");
  if (ref.nbytes > geometry_.slot_bytes) {
    throw ShmRingError(where() + std::to_string(ref.nbytes) + " bytes exceed the slot size " +
                       std::to_string(geometry_.slot_bytes));
  }
  SlotHeader* s = slot_of(base_, ref.slot);
  const uint64_t state = s->state.load(std::memory_order_acquire);
  if (state != ref.sequence) {
    throw ShmRingError(where() + "holds " + (state == 0 ? std::string("nothing") : "message " + std::to_string(state)) +
                       ", descriptor names message " + std::to_string(ref.sequence) + " (stale or torn)");
  }
  if (s->nbytes != ref.nbytes) {
    throw ShmRingError(where() + "holds " + std::to_string(s->nbytes) + " bytes, descriptor says " +
                       std::to_string(ref.nbytes));
  }
  return {data_of(base_, layout_of(geometry_), ref.slot), ref.nbytes};
}

ReadyWord ShmRingConsumer::ready_word(const SlotRef& ref) const {
  // The caller has view()ed ref (HiddenReceiver::resolve): only what indexing needs is checked again.
  if (ref.generation != generation_ || ref.slot >= geometry_.n_slots || ref.sequence == 0) {
    throw ShmRingError("shm ring " + name_ + ": ready word of a descriptor this ring does not hold");
  }
  return ReadyWord{reinterpret_cast<uint32_t*>(&slot_of(base_, ref.slot)->ready), ready_value(ref.sequence)};
}

int64_t ShmRingConsumer::producer_pid() const {
  return header_of(base_)->producer_pid;
}

bool ShmRingConsumer::release(const SlotRef& ref) {
  if (ref.generation != generation_ || ref.slot >= geometry_.n_slots || ref.sequence == 0) return false;
  uint64_t expected = ref.sequence;
  return slot_of(base_, ref.slot)->state.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
}

}  // namespace ds::ipc
