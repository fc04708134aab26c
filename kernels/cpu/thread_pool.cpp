#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <exception>
#include <memory>

namespace ds::cpu {

// Protocol: parallel_for publishes a job (job_, job_n_, job_chunk_, next_ = 0) under mu_ and
// bumps generation_. Workers and the caller take chunks [next_, next_+chunk) under mu_ until
// next_ reaches job_n_; busy_ counts threads inside fn. The caller returns once every chunk has
// been taken and busy_ is back to zero, so no thread touches fn after parallel_for returns.

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  // The caller works too, so n_threads - 1 helpers.
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker_loop(int /*index*/) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    while (job_ != nullptr && next_ < job_n_) {
      const size_t begin = next_;
      const size_t end = std::min(job_n_, begin + job_chunk_);
      next_ = end;
      ++busy_;
      const auto* fn = job_;
      lock.unlock();
      // A worker cannot hand an exception back to the caller: fn must not throw.
      [&]() noexcept { (*fn)(begin, end); }();
      lock.lock();
      if (--busy_ == 0 && next_ >= job_n_) cv_done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(size_t n, size_t min_chunk, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  min_chunk = std::max<size_t>(1, min_chunk);
  if (n_threads_ <= 1 || n <= min_chunk) {
    fn(0, n);
    return;
  }
  // About four chunks per thread balances uneven work without much locking.
  const size_t per = (n + 4 * static_cast<size_t>(n_threads_) - 1) / (4 * static_cast<size_t>(n_threads_));
  const size_t chunk = std::max(min_chunk, per);

  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  next_ = 0;
  ++generation_;
  cv_work_.notify_all();

  std::exception_ptr error;
  while (next_ < job_n_) {
    const size_t begin = next_;
    const size_t end = std::min(job_n_, begin + chunk);
    next_ = end;
    ++busy_;
    lock.unlock();
    try {
      fn(begin, end);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    lock.lock();
    --busy_;
    if (error) next_ = job_n_;  // skip the chunks nobody has taken yet
  }
  cv_done_.wait(lock, [&] { return busy_ == 0; });
  job_ = nullptr;
  job_n_ = 0;
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

namespace {
std::mutex g_default_mu;
std::unique_ptr<ThreadPool> g_default;
}  // namespace

ThreadPool* default_pool() {
  std::lock_guard<std::mutex> lock(g_default_mu);
  if (!g_default) g_default = std::make_unique<ThreadPool>(1);
  return g_default.get();
}

void set_default_pool_threads(int n_threads) {
  std::lock_guard<std::mutex> lock(g_default_mu);
  if (g_default && g_default->size() == std::max(1, n_threads)) return;
  g_default = std::make_unique<ThreadPool>(n_threads);
}

}  // namespace ds::cpu
