#include "kernels/cuda/device_info.h"

#include <cuda_runtime.h>

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

}  // namespace ds::cuda
