#include "coordinator/serving/parallel_for.h"

#include <algorithm>
#include <utility>

namespace ds {

ParallelFor::ParallelFor(unsigned helpers) {
  for (unsigned i = 0; i < helpers; ++i) threads_.emplace_back([this] { work(); });
}

ParallelFor::~ParallelFor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

unsigned ParallelFor::default_helpers() {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp(cores / 2, 1u, 7u);
}

// Takes indices until none is left; records the first exception.
void ParallelFor::drain() {
  for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) {
    try {
      (*fn_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

// Every helper takes part in every job (run() waits for all of them), so a helper can never
// wake into the next job's indices with the previous job's function.
void ParallelFor::work() {
  unsigned long seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || job_ != seen; });
      if (stop_) return;
      seen = job_;
    }
    drain();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++finished_;
    }
    done_.notify_one();
  }
}

void ParallelFor::run(size_t n, const std::function<void(size_t)>& fn) {
  if (threads_.empty() || n <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    error_ = nullptr;
    finished_ = 0;
    ++job_;
  }
  wake_.notify_all();
  drain();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return finished_ == threads_.size(); });
    error = std::exchange(error_, nullptr);
    fn_ = nullptr;
    n_ = 0;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ds
