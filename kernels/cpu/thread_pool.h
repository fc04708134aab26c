// A small fixed thread pool for the CPU backend: parallel_for over an index range.
// The pool size comes from the worker's options (no environment lookups here).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ds::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 1: run inline
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(begin, end) on disjoint chunks covering [0, n); returns when all are done.
  // Chunks are at least `min_chunk` long. Safe to call from one thread at a time.
  void parallel_for(size_t n, size_t min_chunk, const std::function<void(size_t, size_t)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0, job_chunk_ = 0;
  size_t next_ = 0;
  int busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

// Process-wide default pool used when callers pass nullptr (1 thread unless set).
ThreadPool* default_pool();
void set_default_pool_threads(int n_threads);

}  // namespace ds::cpu
