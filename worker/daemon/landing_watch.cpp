// Producer-death watch for chunks that land after their descriptor (see landing_watch.h).
#include "worker/daemon/landing_watch.h"

#include "common/log.h"
#include "common/process_alive.h"

namespace ds {
namespace {
// How often an armed watch looks: a dead producer is noticed within this, and a live one costs
// a thousand wake-ups a second only while a chunk is in flight.
constexpr auto kPollPeriod = std::chrono::milliseconds(1);
}  // namespace

LandingWatch::LandingWatch(std::chrono::milliseconds deadline, std::function<bool(int64_t)> producer_alive)
    : deadline_(deadline),
      producer_alive_(producer_alive ? std::move(producer_alive) : process_alive),
      thread_([this] { loop(); }) {}

LandingWatch::~LandingWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LandingWatch::arm(const HostSignal& ready, int64_t producer_pid) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = ready;
    producer_pid_ = producer_pid;
    armed_at_ = std::chrono::steady_clock::now();
    forced_ = false;
  }
  cv_.notify_all();
}

bool LandingWatch::disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  ready_ = {};
  return forced_;
}

void LandingWatch::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!ready_) {
      cv_.wait(lock, [this] { return stop_ || static_cast<bool>(ready_); });
      continue;
    }
    if (ready_.landed()) {
      ready_ = {};  // landed: nothing left to watch for this chunk
      continue;
    }
    const bool dead = !producer_alive_(producer_pid_);
    if (dead || std::chrono::steady_clock::now() - armed_at_ > deadline_) {
      ds::log::error("worker", ds::log::Msg()
                                   << "hidden chunk never landed: "
                                   << (dead ? "the previous stage (pid " + std::to_string(producer_pid_) + ") is gone"
                                            : std::string("deadline passed"))
                                   << "; releasing the wait, the step fails");
      forced_ = true;
      ready_.set();
      ready_ = {};
      continue;
    }
    cv_.wait_for(lock, kPollPeriod, [this] { return stop_; });
  }
}

}  // namespace ds
