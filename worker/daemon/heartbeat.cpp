// Heartbeat thread (see heartbeat.h).
#include "worker/daemon/heartbeat.h"

#include <chrono>

namespace ds {

int64_t steady_now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

namespace {
uint64_t unix_now_ms() {
  using namespace std::chrono;
  return static_cast<uint64_t>(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}
}  // namespace

HeartbeatThread::HeartbeatThread(ipc::Context& ctx, std::string endpoint, uint32_t rank, uint64_t instance_id,
                                 int period_ms, const WorkerStats& stats)
    : ctx_(ctx),
      endpoint_(std::move(endpoint)),
      rank_(rank),
      instance_id_(instance_id),
      period_ms_(period_ms),
      stats_(stats),
      thread_([this] { loop(); }) {}

HeartbeatThread::~HeartbeatThread() {
  stop_ = true;
  thread_.join();
}

void HeartbeatThread::loop() {
  // The socket lives on this thread only: ZeroMQ sockets are not thread-safe.
  ipc::ZmqChannel channel(ctx_, ipc::SocketRole::kDealer, endpoint_);
  while (!stop_) {
    ipc::v1::Envelope env;
    env.set_sender_instance(instance_id_);
    ipc::v1::Heartbeat* hb = env.mutable_heartbeat();
    hb->set_rank(rank_);
    hb->set_instance_id(instance_id_);
    hb->set_sent_unix_ms(unix_now_ms());
    hb->set_steps_done(stats_.steps_done.load());
    const int64_t since = stats_.busy_since_ms.load();
    hb->set_busy(since != 0);
    hb->set_busy_ms(since != 0 ? static_cast<uint64_t>(steady_now_ms() - since) : 0);
    hb->set_n_sequences(stats_.n_sequences.load());
    channel.send(env);  // a full queue (coordinator gone) just drops this beat
    for (int waited = 0; waited < period_ms_ && !stop_; waited += 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace ds
