// A small fixed pool for data-parallel loops on the engine thread's critical path (the grammar
// masks of a step's constrained rows: ~50 us each, 64 rows would be 3 ms on one thread). The
// caller's thread takes part; run() returns when every index is done.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ds {

class ParallelFor {
 public:
  // `helpers` threads besides the caller's (0: run() is a plain loop).
  explicit ParallelFor(unsigned helpers);
  ~ParallelFor();
  ParallelFor(const ParallelFor&) = delete;
  ParallelFor& operator=(const ParallelFor&) = delete;

  // fn(i) for i in [0, n), on the caller and the helpers. The first exception thrown by fn is
  // rethrown here (after every started call has returned).
  void run(size_t n, const std::function<void(size_t)>& fn);
  unsigned helpers() const { return static_cast<unsigned>(threads_.size()); }

  // Helpers for a machine: half its cores, 1..7.
  static unsigned default_helpers();

 private:
  void work();
  void drain();

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  size_t finished_ = 0;    // helpers done with the current job
  unsigned long job_ = 0;  // incremented per run()
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace ds
