// Helpers of the GPU tests: a skip when no device is visible (CI builds these with nvcc but has
// no GPU), RAII device arrays, and (from kernel_test_util.h) seeded random data and error metrics.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_info.h"
#include "tests/kernels/kernel_test_util.h"

// Skips the current test (cleanly, with a reason) on machines without a CUDA device.
#define DS_REQUIRE_GPU()                                                                      \
  do {                                                                                        \
    if (::ds::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test skipped"; \
  } while (0)

namespace ds::cuda::test {

// A device array of T that frees itself; filled from and read back to host vectors.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    DS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)));
    DS_CUDA_CHECK(cudaMemset(p_, 0, std::max<size_t>(n, 1) * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return p_; }
  const T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    DS_CUDA_CHECK(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  // Waits for all queued work, then copies the whole array back.
  std::vector<T> download() const {
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> out(n_);
    DS_CUDA_CHECK(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// Seeded random data and error metrics: the CPU kernel tests' helpers.
using ::ds::cpu::test::max_abs_diff;
using ::ds::cpu::test::rel_error;
using ::ds::cpu::test::Rng;

}  // namespace ds::cuda::test
