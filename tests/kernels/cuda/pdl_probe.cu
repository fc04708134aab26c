#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "tests/kernels/cuda/pdl_probe.h"

namespace ds::cuda::test {
namespace {

constexpr unsigned kThreads = 256;

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void late_copy_kernel(const uint32_t* src, uint32_t* dst, size_t n, unsigned delay_us) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const uint64_t until = global_ns() + uint64_t{delay_us} * 1000u;
  while (global_ns() < until) __nanosleep(1000);
  for (size_t i = detail::global_thread(); i < n; i += detail::global_threads()) dst[i] = src[i];
}

__global__ void copy_without_wait_kernel(const uint32_t* src, uint32_t* dst, size_t n) {
  for (size_t i = detail::global_thread(); i < n; i += detail::global_threads()) dst[i] = src[i];
}

}  // namespace

cudaError_t launch_late_copy(const void* src, void* dst, size_t n_words, unsigned delay_us, cudaStream_t stream) {
  if (src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  // Few enough blocks that all are resident at once (each must run its trigger for the release).
  return detail::launch_maybe_dependent(late_copy_kernel, dim3(detail::grid_for(n_words, kThreads, 64)), dim3(kThreads),
                                        0, stream, false, static_cast<const uint32_t*>(src),
                                        static_cast<uint32_t*>(dst), n_words, delay_us);
}

cudaError_t launch_copy_without_wait(const void* src, void* dst, size_t n_words, cudaStream_t stream) {
  if (src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  return detail::launch_maybe_dependent(copy_without_wait_kernel, dim3(detail::grid_for(n_words, kThreads, 64)),
                                        dim3(kThreads), 0, stream, true, static_cast<const uint32_t*>(src),
                                        static_cast<uint32_t*>(dst), n_words);
}

}  // namespace ds::cuda::test
