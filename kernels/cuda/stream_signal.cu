// Stream-ordered host-word signals (see stream_signal.h). The runtime has no wrapper for the
// driver's cuStreamWriteValue32 / cuStreamWaitValue32, and the binaries link the runtime
// statically without libcuda at link time, so the two entry points are looked up at run time.
#include <cuda.h>

#include <mutex>

#include "kernels/cuda/stream_signal.h"

namespace ds::cuda {
namespace {

using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

struct DriverOps {
  WriteValue32 write = nullptr;
  WaitValue32 wait = nullptr;
};

void* entry_point(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess) fn = nullptr;
#else
  if (cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found) != cudaSuccess) fn = nullptr;
#endif
  if (found != cudaDriverEntryPointSuccess) fn = nullptr;
  cudaGetLastError();  // a failed lookup must not linger as the thread's last error
  return fn;
}

const DriverOps& driver_ops() {
  static DriverOps ops;
  static std::once_flag once;
  std::call_once(once, [] {
    ops.write = reinterpret_cast<WriteValue32>(entry_point("cuStreamWriteValue32"));
    ops.wait = reinterpret_cast<WaitValue32>(entry_point("cuStreamWaitValue32"));
  });
  return ops;
}

// The device address of a registered host word.
cudaError_t device_address(const uint32_t* word, CUdeviceptr* out) {
  void* dev = nullptr;
  const cudaError_t rc = cudaHostGetDevicePointer(&dev, const_cast<uint32_t*>(word), 0);
  if (rc != cudaSuccess) return rc;
  *out = reinterpret_cast<CUdeviceptr>(dev);
  return cudaSuccess;
}

cudaError_t to_runtime(CUresult r) {
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
}

}  // namespace

cudaError_t stream_write_host_word(cudaStream_t stream, uint32_t* word, uint32_t value) {
  const DriverOps& ops = driver_ops();
  if (ops.write == nullptr || word == nullptr) return cudaErrorNotSupported;
  CUdeviceptr addr = 0;
  if (const cudaError_t rc = device_address(word, &addr); rc != cudaSuccess) return rc;
  // Default flags: the write is preceded by a fence, so the copy queued before it has landed.
  return to_runtime(ops.write(reinterpret_cast<CUstream>(stream), addr, value, CU_STREAM_WRITE_VALUE_DEFAULT));
}

cudaError_t stream_wait_host_word(cudaStream_t stream, const uint32_t* word, uint32_t value) {
  const DriverOps& ops = driver_ops();
  if (ops.wait == nullptr || word == nullptr) return cudaErrorNotSupported;
  CUdeviceptr addr = 0;
  if (const cudaError_t rc = device_address(word, &addr); rc != cudaSuccess) return rc;
  return to_runtime(ops.wait(reinterpret_cast<CUstream>(stream), addr, value, CU_STREAM_WAIT_VALUE_EQ));
}

}  // namespace ds::cuda
