#include "kernels/cuda/device_info.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>

namespace ds::cuda {
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

bool device_memory(int device, size_t* free_bytes, size_t* total_bytes) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const bool ok = cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess;
  cudaSetDevice(previous);
  if (!ok) cudaGetLastError();
  return ok;
}

bool current_device_is_sm90_or_newer() {
  static std::array<std::atomic<int>, 64> known{};  // per device: 0 unknown, 1 no, 2 yes
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    cudaGetLastError();
    return false;
  }
  int k = known[static_cast<size_t>(dev)].load(std::memory_order_relaxed);
  if (k == 0) {
    k = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9 ? 2 : 1;
    known[static_cast<size_t>(dev)].store(k, std::memory_order_relaxed);
  }
  return k == 2;
}

}  // namespace ds::cuda
