// LandingWatch (worker/daemon/landing_watch.h): a chunk whose bytes land after its descriptor is
// waited on through its ring slot's ready word; when the producing stage dies first, the watch
// must end the wait (set the word) and say so, or the next stage would hang for good.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "worker/daemon/landing_watch.h"

namespace ds {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kValue = 0x80000007u;

// A pid that surely is not running: a child that has exited and been reaped.
int64_t reaped_child_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

TEST(LandingWatch, LeavesALandedChunkAlone) {
  LandingWatch watch;
  uint32_t word = 0;
  watch.arm(HostSignal{&word, kValue}, getpid());
  std::this_thread::sleep_for(5ms);
  HostSignal{&word, kValue}.set();  // the producer's device wrote it
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(watch.disarm());
  EXPECT_EQ(word, kValue);
}

TEST(LandingWatch, ALiveProducerIsWaitedFor) {
  LandingWatch watch(5s);
  uint32_t word = 0;
  watch.arm(HostSignal{&word, kValue}, getpid());  // alive for sure
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(word, 0u) << "the watch may not release the wait of a live producer before its deadline";
  EXPECT_FALSE(watch.disarm());
}

// The waiting thread (a cpu stage's host wait; a cuda stage's stream waits the same way on the
// device) is released within milliseconds of the producer's death, and the step is marked failed.
TEST(LandingWatch, ADeadProducerReleasesTheWaitAndFailsTheStep) {
  LandingWatch watch(30s);
  uint32_t word = 0;
  const HostSignal ready{&word, kValue};
  const auto t0 = std::chrono::steady_clock::now();
  watch.arm(ready, reaped_child_pid());
  ready.wait();  // would never return without the watch
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_TRUE(watch.disarm());
  // Armed again for the next chunk: a fresh verdict.
  word = 0;
  watch.arm(ready, getpid());
  ready.set();
  EXPECT_FALSE(watch.disarm());
}

TEST(LandingWatch, DeadlineReleasesAStuckProducer) {
  LandingWatch watch(20ms, [](int64_t) { return true; });
  uint32_t word = 0;
  watch.arm(HostSignal{&word, kValue}, 1);
  HostSignal{&word, kValue}.wait();
  EXPECT_TRUE(watch.disarm());
}

}  // namespace
}  // namespace ds
