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
}  // namespace ds::cuda
