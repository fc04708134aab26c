// Background threads running posted tasks. With one thread (the default) tasks run in order:
// the service uses that to call Engine::cancel() for stop strings, which happens inside an
// engine callback, where calling back into the engine could deadlock. With several, tasks
// start in order and run concurrently: the request threads, which parse, render and tokenize
// so that the HTTP I/O threads never do work proportional to a request's size.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ds::openai {

class TaskThread {
 public:
  explicit TaskThread(unsigned threads = 1);
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
  std::vector<std::thread> threads_;
};

}  // namespace ds::openai
