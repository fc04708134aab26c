#include <cuda_runtime.h>

#include <array>
#include <atomic>

#include "kernels/cuda/device_info.h"

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

namespace {

constexpr int kMaxDevices = 64;

// attribute of the current device, cached per device (0 = not yet asked); `fallback` when the
// query fails (not cached, so a later call may succeed).
template <cudaDeviceAttr kAttr>
int cached_attribute(int fallback) {
  static std::array<std::atomic<int>, kMaxDevices> known{};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return fallback;
  }
  int v = known[static_cast<size_t>(dev)].load(std::memory_order_relaxed);
  if (v == 0) {
    if (cudaDeviceGetAttribute(&v, kAttr, dev) != cudaSuccess || v <= 0) {
      cudaGetLastError();
      return fallback;
    }
    known[static_cast<size_t>(dev)].store(v, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace

bool current_device_is_sm90_or_newer() {
  return cached_attribute<cudaDevAttrComputeCapabilityMajor>(0) >= 9;
}

int current_device_sm_count() {
  return cached_attribute<cudaDevAttrMultiProcessorCount>(132);
}

}  // namespace ds::cuda
