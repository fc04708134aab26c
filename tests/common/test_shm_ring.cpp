// The shared-memory hidden-state ring (common/ipc/shm_ring.h) and the transport choice built on
// it (common/ipc/hidden_transport.h): wraparound, back-pressure without loss or deadlock,
// stale / torn slot detection, bad descriptors, recreation after a crash, ring growth.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/ipc/channel.h"
#include "common/ipc/endpoints.h"
#include "common/ipc/hidden_transport.h"
#include "common/ipc/shm_ring.h"

namespace ds::ipc {
namespace {

// A name private to this test process and test.
std::string test_ring_name(const std::string& tag) {
  return shm_ring_name("test-" + std::to_string(getpid()) + "-" + tag);
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + seed * 7 + 3) & 0xff);
  return v;
}

std::vector<uint8_t> copy_of(std::span<const uint8_t> s) {
  return {s.begin(), s.end()};
}

TEST(ShmRing, WrapsAroundInOrder) {
  const std::string name = test_ring_name("wrap");
  ShmRingProducer prod(name, {3, 4096}, 42);
  ShmRingConsumer cons(name);
  EXPECT_EQ(cons.generation(), 42u);
  EXPECT_EQ(cons.geometry().n_slots, 3u);
  for (uint32_t i = 0; i < 10; ++i) {
    const auto msg = pattern(100 + i * 300, i);
    const std::optional<SlotRef> ref = prod.write(msg, 0);
    ASSERT_TRUE(ref.has_value()) << "message " << i;
    EXPECT_EQ(ref->slot, i % 3);
    EXPECT_EQ(ref->sequence, i + 1);
    const std::span<const uint8_t> got = cons.view(*ref);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data()) % 4096, 0u) << "slots are page-aligned";
    EXPECT_EQ(copy_of(got), msg);
    EXPECT_TRUE(cons.release(*ref));
  }
  EXPECT_TRUE(prod.all_free());
}

TEST(ShmRing, FullRingRefusesUntilASlotIsHandedBack) {
  const std::string name = test_ring_name("full");
  ShmRingProducer prod(name, {2, 64}, 7);
  ShmRingConsumer cons(name);
  const auto a = prod.write(pattern(64, 1), 0), b = prod.write(pattern(64, 2), 0);
  ASSERT_TRUE(a && b);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(prod.write(pattern(64, 3), 30).has_value()) << "both slots are held";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30)) << "it waited before giving up";
  EXPECT_FALSE(prod.all_free());
  // Nothing was lost: the held messages are intact, and the refused one can be written later.
  EXPECT_EQ(copy_of(cons.view(*a)), pattern(64, 1));
  EXPECT_TRUE(cons.release(*a));
  const auto c = prod.write(pattern(64, 3), 0);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->slot, 0u);
  EXPECT_EQ(c->sequence, 3u);
  EXPECT_EQ(copy_of(cons.view(*b)), pattern(64, 2));
  EXPECT_EQ(copy_of(cons.view(*c)), pattern(64, 3));
}

TEST(ShmRing, ProducerAndConsumerThreadsLoseNothing) {
  const std::string name = test_ring_name("threads");
  ShmRingProducer prod(name, {2, 1024}, 9);
  ShmRingConsumer cons(name);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<SlotRef> queue;  // plays the ZeroMQ socket carrying descriptors
  constexpr uint32_t kMessages = 2000;
  std::atomic<uint32_t> bad{0};
  std::thread consumer([&] {
    for (uint32_t i = 0; i < kMessages; ++i) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !queue.empty(); });
      const SlotRef ref = queue.front();
      queue.pop_front();
      lock.unlock();
      if (i % 97 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow step now and then
      if (copy_of(cons.view(ref)) != pattern(1 + i % 1024, i) || ref.sequence != i + 1) ++bad;
      if (!cons.release(ref)) ++bad;
    }
  });
  for (uint32_t i = 0; i < kMessages; ++i) {
    const auto ref = prod.write(pattern(1 + i % 1024, i), 10000);
    ASSERT_TRUE(ref.has_value()) << "producer stuck at message " << i;
    std::lock_guard<std::mutex> lock(mu);
    queue.push_back(*ref);
    cv.notify_one();
  }
  consumer.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_TRUE(prod.all_free());
}

TEST(ShmRing, StaleAndTornSlotsAreDetected) {
  const std::string name = test_ring_name("stale");
  ShmRingProducer prod(name, {2, 256}, 11);
  ShmRingConsumer cons(name);
  const auto first = prod.write(pattern(256, 1), 0);
  ASSERT_TRUE(first);
  ASSERT_TRUE(cons.release(*first));
  EXPECT_THROW(cons.view(*first), ShmRingError) << "already handed back";
  EXPECT_FALSE(cons.release(*first)) << "a second hand-back is refused";
  // The slot is reused by message 3: the old descriptor must not read it.
  const auto second = prod.write(pattern(256, 2), 0);
  ASSERT_TRUE(second);
  const auto third = prod.write(pattern(256, 3), 0);
  ASSERT_TRUE(third);
  ASSERT_EQ(third->slot, first->slot);
  try {
    cons.view(*first);
    ADD_FAILURE() << "stale descriptor accepted";
  } catch (const ShmRingError& e) {
    EXPECT_NE(std::string(e.what()).find("stale or torn"), std::string::npos) << e.what();
  }
  // Torn: while one reader still reads, another mapping hands the slot back and the producer
  // rewrites it; the first reader's hand-back tells it its bytes may be torn.
  const std::span<const uint8_t> in_use = cons.view(*third);
  ASSERT_EQ(in_use.size(), 256u);
  ShmRingConsumer other(name);
  ASSERT_TRUE(other.release(*second));
  ASSERT_TRUE(other.release(*third));
  ASSERT_TRUE(prod.write(pattern(256, 4), 0));
  const auto fifth = prod.write(pattern(256, 5), 0);  // overwrites the slot being read
  ASSERT_TRUE(fifth);
  ASSERT_EQ(fifth->slot, third->slot);
  EXPECT_FALSE(cons.release(*third)) << "the reader learns its bytes may be torn";
  EXPECT_THROW(cons.view(*third), ShmRingError);
}

TEST(ShmRing, BadDescriptorsGetClearErrors) {
  const std::string name = test_ring_name("bad");
  ShmRingProducer prod(name, {4, 128}, 13);
  ShmRingConsumer cons(name);
  const auto ok = prod.write(pattern(100, 1), 0);
  ASSERT_TRUE(ok);
  auto expect_error = [&](SlotRef ref, const std::string& words) {
    try {
      cons.view(ref);
      ADD_FAILURE() << "accepted a descriptor that should fail with '" << words << "'";
    } catch (const ShmRingError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  SlotRef r = *ok;
  r.slot = 4;
  expect_error(r, "out of range");
  r = *ok;
  r.nbytes = 129;
  expect_error(r, "exceed the slot size");
  r = *ok;
  r.nbytes = 99;
  expect_error(r, "holds 100 bytes");
  r = *ok;
  r.generation = 12;
  expect_error(r, "stale");
  r = *ok;
  r.sequence = 0;
  expect_error(r, "invalid message number");
  EXPECT_EQ(copy_of(cons.view(*ok)), pattern(100, 1)) << "the good descriptor still works";
  // Bytes larger than a slot are refused by the producer (the caller sends them inline).
  EXPECT_FALSE(prod.write(pattern(129, 1), 0).has_value());
}

TEST(ShmRing, BadGeometryAndMissingRingAreErrors) {
  EXPECT_THROW(ShmRingProducer(test_ring_name("g1"), {1, 64}, 1), ShmRingError);
  EXPECT_THROW(ShmRingProducer(test_ring_name("g2"), {4, 0}, 1), ShmRingError);
  EXPECT_THROW(ShmRingConsumer(test_ring_name("absent")), ShmRingError);
}

TEST(ShmRing, RecreatedAfterACrashAndUnlinkedOnShutdown) {
  const std::string name = test_ring_name("crash");
  auto old_prod = std::make_unique<ShmRingProducer>(name, ShmRingGeometry{2, 64}, 100);
  ShmRingConsumer old_cons(name);
  const auto old_ref = old_prod->write(pattern(64, 1), 0);
  ASSERT_TRUE(old_ref);
  // A restarted producer (the old one "crashed" holding the name) recreates the ring.
  ShmRingProducer fresh(name, {2, 64}, 200);
  ShmRingConsumer new_cons(name);
  EXPECT_EQ(new_cons.generation(), 200u);
  EXPECT_THROW(new_cons.view(*old_ref), ShmRingError) << "a descriptor of the old ring is stale";
  EXPECT_EQ(copy_of(old_cons.view(*old_ref)), pattern(64, 1)) << "the old mapping stays readable";
  old_prod.release();  // leak on purpose: a crashed process never runs its destructor
  { ShmRingProducer scoped(test_ring_name("scoped"), {2, 64}, 1); }
  EXPECT_THROW(ShmRingConsumer(test_ring_name("scoped")), ShmRingError) << "unlinked on clean shutdown";
}

// ---- transport choice ---------------------------------------------------------------------

// A Channel that records what was sent.
class RecordingChannel : public Channel {
 public:
  struct Sent {
    v1::Envelope env;
    std::vector<uint8_t> bulk;
  };
  std::vector<Sent> sent;
  bool accept = true;
  bool send(const v1::Envelope& env, std::span<const uint8_t> bulk, const std::string&) override {
    if (!accept) return false;
    sent.push_back({env, {bulk.begin(), bulk.end()}});
    return true;
  }
  RecvStatus recv(Received*, int, std::string*) override { return RecvStatus::kTimeout; }
};

v1::Envelope forward_of(size_t nbytes) {
  v1::Envelope env;
  env.mutable_stage_forward()->mutable_hidden()->set_nbytes(nbytes);
  env.mutable_stage_forward()->mutable_hidden()->set_dtype(v1::DTYPE_F32);
  return env;
}

TEST(HiddenTransport, ChoiceFollowsTheEndpoint) {
  EXPECT_TRUE(uses_shm_ring(HiddenTransport::kAuto, "ipc:///tmp/deltaserve-x/data-1"));
  EXPECT_FALSE(uses_shm_ring(HiddenTransport::kAuto, "tcp://host:5001"));
  EXPECT_FALSE(uses_shm_ring(HiddenTransport::kInline, "ipc:///tmp/deltaserve-x/data-1"));
  HiddenTransport t;
  EXPECT_TRUE(parse_hidden_transport("inline", &t));
  EXPECT_EQ(t, HiddenTransport::kInline);
  EXPECT_FALSE(parse_hidden_transport("shm", &t));
}

TEST(HiddenTransport, RingPathGrowsAndInlinePathStillWorks) {
  RecordingChannel ch;
  HiddenRingOptions o;
  o.n_slots = 2;
  o.min_slot_bytes = 64;
  o.max_slot_bytes = 1024;
  o.wait_ms = 20;
  HiddenSender sender(ch, test_ring_name("sender"), o, 77);
  HiddenReceiver receiver;
  const std::vector<size_t> sizes{40, 64, 200, 50, 1024, 2000};  // grows 64 -> 256 -> 1024; 2000 goes inline
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto msg = pattern(sizes[i], static_cast<uint32_t>(i));
    ASSERT_TRUE(sender.send(forward_of(msg.size()), msg));
    const auto& sent = ch.sent.back();
    const v1::HiddenChunk& chunk = sent.env.stage_forward().hidden();
    EXPECT_EQ(chunk.has_shm(), sizes[i] <= 1024) << "size " << sizes[i];
    EXPECT_EQ(copy_of(receiver.resolve(chunk, sent.bulk)), msg);
    EXPECT_TRUE(receiver.release(chunk));
    if (chunk.has_shm()) {
      EXPECT_THROW(ShmRingConsumer{chunk.shm().ring()}, ShmRingError) << "the receiver unlinked the mapped ring's name";
    }
  }
  EXPECT_EQ(sender.ring_messages(), 5u);
  EXPECT_EQ(sender.inline_messages(), 1u);
}

// A ring of two 64-byte slots that gives up on a free slot after 10 ms: filled by two messages.
HiddenRingOptions two_small_slots() {
  HiddenRingOptions o;
  o.n_slots = 2;
  o.min_slot_bytes = 64;
  o.wait_ms = 10;
  return o;
}

TEST(HiddenTransport, FullRingFallsBackInlineInOrder) {
  RecordingChannel ch;
  const HiddenRingOptions o = two_small_slots();
  HiddenSender sender(ch, test_ring_name("fallback"), o, 78);
  HiddenReceiver receiver;
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(sender.send(forward_of(64), pattern(64, i)));  // nobody reads
  EXPECT_EQ(sender.ring_messages(), 2u);
  EXPECT_EQ(sender.inline_messages(), 2u);
  for (uint32_t i = 0; i < 4; ++i) {
    const v1::HiddenChunk& chunk = ch.sent[i].env.stage_forward().hidden();
    EXPECT_EQ(copy_of(receiver.resolve(chunk, ch.sent[i].bulk)), pattern(64, i)) << "message " << i;
    EXPECT_TRUE(receiver.release(chunk));
  }
  // After a recovery the sender starts a fresh ring: slots a dead receiver held do not matter,
  // and descriptors of the old ring are stale.
  ASSERT_TRUE(sender.send(forward_of(64), pattern(64, 9)));
  ASSERT_TRUE(sender.send(forward_of(64), pattern(64, 10)));
  const v1::HiddenChunk old_chunk = ch.sent.back().env.stage_forward().hidden();
  sender.restart();
  ASSERT_TRUE(sender.send(forward_of(64), pattern(64, 11)));
  const v1::HiddenChunk& fresh = ch.sent.back().env.stage_forward().hidden();
  ASSERT_TRUE(fresh.has_shm());
  EXPECT_NE(fresh.shm().generation(), old_chunk.shm().generation());
  EXPECT_EQ(copy_of(receiver.resolve(fresh, {})), pattern(64, 11));
  EXPECT_THROW(receiver.resolve(old_chunk, {}), ShmRingError) << "the old ring is gone";
  EXPECT_TRUE(receiver.release(fresh));
  // A send the channel refuses gives its slot back.
  ch.accept = false;
  EXPECT_FALSE(sender.send(forward_of(64), pattern(64, 12)));
  EXPECT_FALSE(sender.send(forward_of(64), pattern(64, 13)));
  ch.accept = true;
  EXPECT_TRUE(sender.send(forward_of(64), pattern(64, 14)));
  EXPECT_TRUE(ch.sent.back().env.stage_forward().hidden().has_shm()) << "refused sends leaked no slot";
}

// The zero-copy form: the caller fills a reserved slot in place (a worker's device-to-host copy
// lands there); a full ring reserves an inline buffer instead; abandoned reservations leak no slot.
TEST(HiddenTransport, ReservedChunksAreFilledInPlace) {
  RecordingChannel ch;
  const HiddenRingOptions o = two_small_slots();
  HiddenSender sender(ch, test_ring_name("reserve"), o, 79);
  HiddenReceiver receiver;
  auto fill = [&](uint32_t seed) {
    const std::span<uint8_t> dst = sender.reserve(64);
    EXPECT_EQ(dst.size(), 64u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(dst.data()) % 16, 0u);
    const auto p = pattern(64, seed);
    std::copy(p.begin(), p.end(), dst.begin());
    return sender.send_reserved(forward_of(64));
  };
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(fill(i));  // nobody reads: the third goes inline
  EXPECT_EQ(sender.ring_messages(), 2u);
  EXPECT_EQ(sender.inline_messages(), 1u);
  EXPECT_FALSE(ch.sent[2].env.stage_forward().hidden().has_shm());
  for (uint32_t i = 0; i < 3; ++i) {
    const v1::HiddenChunk& chunk = ch.sent[i].env.stage_forward().hidden();
    EXPECT_EQ(copy_of(receiver.resolve(chunk, ch.sent[i].bulk)), pattern(64, i)) << "message " << i;
    EXPECT_TRUE(receiver.release(chunk));
  }
  // An abandoned reservation (the forward threw) hands its slot back: two more ring sends fit.
  (void)sender.reserve(64);
  sender.abandon();
  (void)sender.reserve(64);  // a new reservation abandons an open one too
  ASSERT_TRUE(fill(7));
  ASSERT_TRUE(fill(8));
  EXPECT_EQ(sender.ring_messages(), 4u);
  EXPECT_THROW(sender.send_reserved(forward_of(64)), std::logic_error) << "nothing reserved";
}

// --early-handoff: a reserved slot carries a ready word. Sent with lands_later, the receiver gets
// that word (same memory, the message's value) and the producer's pid to watch; the word starts
// "not landed" on every lap of the slot; an inline reservation cannot land later.
TEST(HiddenTransport, ChunksThatLandLaterCarryTheSlotsReadyWord) {
  RecordingChannel ch;
  HiddenSender sender(ch, test_ring_name("landing"), two_small_slots(), 83);
  HiddenReceiver receiver;
  std::vector<uint32_t> values;
  for (uint32_t i = 0; i < 4; ++i) {  // two laps of the two slots
    const std::span<uint8_t> dst = sender.reserve(64);
    const std::optional<ReadyWord> ready = sender.reserved_ready();
    ASSERT_TRUE(ready);
    EXPECT_FALSE(ready->landed()) << "lap " << i << ": reset when the slot was taken";
    ASSERT_TRUE(sender.send_reserved(forward_of(64), /*lands_later=*/true));
    const v1::HiddenChunk& chunk = ch.sent[i].env.stage_forward().hidden();
    ASSERT_TRUE(chunk.shm().lands_later());
    (void)receiver.resolve(chunk, ch.sent[i].bulk);  // the descriptor is valid before the bytes land
    const std::optional<HiddenReceiver::Landing> landing = receiver.landing(chunk);
    ASSERT_TRUE(landing);
    EXPECT_NE(landing->ready.word, ready->word) << "the receiver's own mapping of the same word";
    EXPECT_EQ(landing->ready.value, ready->value);
    EXPECT_EQ(landing->producer_pid, getpid());
    EXPECT_FALSE(landing->ready.landed());
    const auto p = pattern(64, i);  // the producer's device lands the rows, then the word
    std::copy(p.begin(), p.end(), dst.begin());
    ready->set();
    EXPECT_TRUE(landing->ready.landed());
    EXPECT_EQ(copy_of(receiver.resolve(chunk, ch.sent[i].bulk)), p);
    EXPECT_TRUE(receiver.release(chunk));
    values.push_back(ready->value);
  }
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_NE(values[i], 0u);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(values[i], values[j]) << "a slot's laps need distinct values";
  }
  // A chunk sent without the flag has no landing to wait for.
  (void)sender.reserve(64);
  ASSERT_TRUE(sender.send_reserved(forward_of(64)));
  const v1::HiddenChunk& plain = ch.sent[4].env.stage_forward().hidden();
  (void)receiver.resolve(plain, ch.sent[4].bulk);
  EXPECT_FALSE(receiver.landing(plain));
  EXPECT_TRUE(receiver.release(plain));
  // Inline (no ring): nothing to mark, so the bytes must be in place when sent.
  RecordingChannel ch2;
  HiddenSender no_ring(ch2, "", two_small_slots(), 84);
  (void)no_ring.reserve(64);
  EXPECT_FALSE(no_ring.reserved_ready());
  EXPECT_THROW(no_ring.send_reserved(forward_of(64), true), std::logic_error);
}

// Busy polling: a message sent while the poller spins is seen during the spin; with none, the
// wait still ends at its timeout (the spin counted in it), and a spin of 0 is a plain wait.
TEST(PollChannels, SpinsThenSleepsAndKeepsItsTimeout) {
  Context ctx;
  const std::string endpoint = make_ipc_control_endpoint();
  ZmqChannel pull(ctx, SocketRole::kPull, endpoint);
  ZmqChannel push(ctx, SocketRole::kPush, endpoint);
  std::vector<ZmqChannel*> channels{&pull};
  auto elapsed_ms = [](auto t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(poll_channels(channels, 30, 5000), -1);
  EXPECT_GE(elapsed_ms(t0), 29.0) << "the timeout covers the spin";
  EXPECT_LT(elapsed_ms(t0), 1000.0);
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(poll_channels(channels, 20, 0), -1);
  EXPECT_GE(elapsed_ms(t0), 19.0);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_TRUE(push.send(forward_of(8), pattern(8, 1)));
  });
  EXPECT_EQ(poll_channels(channels, 5000, 200000), 0) << "seen while spinning";
  sender.join();
  Received msg;
  std::string why;
  EXPECT_EQ(pull.recv(&msg, 0, &why), RecvStatus::kMessage) << why;
  remove_ipc_endpoint_dir(endpoint);
}

TEST(HiddenTransport, ReceiverRejectsInconsistentChunks) {
  HiddenReceiver receiver;
  v1::HiddenChunk chunk;
  chunk.set_nbytes(8);
  EXPECT_THROW(receiver.resolve(chunk, std::vector<uint8_t>(4)), ShmRingError) << "size mismatch inline";
  chunk.mutable_shm()->set_ring("/etc-passwd");
  EXPECT_THROW(receiver.resolve(chunk, {}), ShmRingError) << "not a deltaserve ring name";
  chunk.mutable_shm()->set_ring(test_ring_name("nowhere"));
  EXPECT_THROW(receiver.resolve(chunk, {}), ShmRingError) << "ring does not exist";
  EXPECT_THROW(receiver.resolve(chunk, std::vector<uint8_t>(8)), ShmRingError) << "slot and bulk at once";
  EXPECT_FALSE(receiver.release(chunk));
}

}  // namespace
}  // namespace ds::ipc
