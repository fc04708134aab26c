// A single background thread running posted tasks in order. The service uses it to call
// Engine::cancel() for stop strings: that happens inside an engine callback, and calling
// back into the engine from its own callback could deadlock.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ds::openai {

class TaskThread {
 public:
  TaskThread();
  ~TaskThread();  // runs the tasks already posted, then joins
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  void post(std::function<void()> task);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ds::openai
