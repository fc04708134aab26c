// Helpers of the GPU tests: a skip when no device is visible (CI builds these with nvcc but has
// no GPU), RAII device arrays, split-rows copies of Q8_0 matrices, a bitwise comparison, and (from
// kernel_test_util.h) seeded random data and error metrics.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/ggml_types.h"
#include "common/q8_split.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_info.h"
#include "tests/kernels/kernel_test_util.h"

// Skips the current test (cleanly, with a reason) on machines without a CUDA device.
#define DS_REQUIRE_GPU()                                                                             \
  do {                                                                                               \
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

// `rows` packed Q8_0 rows of `cols` columns (GGUF order, cols % 512 == 0) reordered into the
// split device layout (GgmlType::Q8_0_SPLIT, common/q8_split.h): upload both and compare.
inline std::vector<uint8_t> q8_split_copy(const uint8_t* gguf, size_t rows, size_t cols) {
  std::vector<uint8_t> split(rows * ggml_row_bytes(GgmlType::Q8_0, cols));
  q8_split_rows(gguf, rows, cols, split.data());
  return split;
}

// Bit-for-bit equality (unlike ==, NaNs with the same bits compare equal).
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Seeded random data and error metrics: the CPU kernel tests' helpers.
using ::ds::cpu::test::max_abs_diff;
using ::ds::cpu::test::rel_error;
using ::ds::cpu::test::Rng;

}  // namespace ds::cuda::test
