// Internal helpers of the CUDA ops (not part of the public contract): argument checks done on
// the host before a launch, grid sizing, warp reductions and the scalar activations, written to
// match kernels/cpu (same formulas; only rounding order and libm ulps differ).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/dependent_launch.h"

namespace ds::cuda::detail {

// ---- host-side checks -------------------------------------------------------------------------

inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// A float array argument: present and 4-byte aligned (nullptr is only fine when nothing is read).
inline bool f32_ok(const float* p) {
  return p != nullptr && aligned_to(p, alignof(float));
}

// Status of the launch just queued (launch-configuration errors surface here, execution errors at
// the next synchronizing call).
inline cudaError_t launch_status() {
  return cudaGetLastError();
}

// Blocks for n items of `per_block`, capped so grid-stride loops cover the rest.
inline unsigned grid_for(size_t n, size_t per_block, size_t cap = 65535u * 32u) {
  size_t g = (n + per_block - 1) / per_block;
  if (g < 1) g = 1;
  if (g > cap) g = cap;
  return static_cast<unsigned>(g);
}

// Largest grid.x a 1-D launch may use.
inline constexpr size_t kMaxGridX = 0x7FFFFFFFu;

// Launches kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when
// `dependent` (sm_90+; elsewhere an ordinary launch): the kernel may start while the previous one in
// the stream finishes, so it must call wait_for_previous_kernel() before it reads anything that
// kernel wrote (or writes anything it may still read). `extra`: one more launch attribute (a
// cluster shape), nullptr for none.
//
// Why reads after the wait are safe along a whole chain of dependent launches A -> B -> C: the
// wait returns once the previous grid has COMPLETED and its writes are visible, not merely
// started. Every kernel launched this way executes the wait in every thread before it exits (the
// first statement, after loads of weights only), so B cannot complete before A has completed;
// C's wait (B complete) therefore implies A complete too, by induction back to the last ordinary
// launch, which started only after everything before it had completed. A kernel launched
// dependent that skipped the wait would break this chain for every kernel after it.
// What may go before the wait: loads of buffers no kernel of the stream writes (weights uploaded
// before the forward, never written by a kernel of it); nothing else, and no store at all.
// A non-kernel operation between two kernels (a memcpy / memset, e.g. ControlBuffer's upload of
// ids or rows): the attribute only relaxes the dependency on an immediately preceding KERNEL, so
// the copy waits for the kernel before it to complete and the next kernel waits for the copy,
// as in any stream; its wait then returns at once. Host-side synchronization is unaffected.
template <typename... Params, typename... Args>
cudaError_t launch_maybe_dependent_with(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                        cudaStream_t stream, bool dependent, const cudaLaunchAttribute* extra,
                                        Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attrs[2]{};
  unsigned n = 0;
  if (dependent) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (extra != nullptr) attrs[n++] = *extra;
  config.attrs = n > 0 ? attrs : nullptr;
  config.numAttrs = n;
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
  if (e != cudaSuccess) cudaGetLastError();  // reported here; not left for an unrelated later check
  return e;
}

template <typename... Params, typename... Args>
cudaError_t launch_maybe_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                   bool dependent, Args... args) {
  return launch_maybe_dependent_with(kernel, grid, block, smem, stream, dependent, nullptr, args...);
}

// launch_maybe_dependent, dependent when the stream is switched on (dependent_launch.h: the decode
// path's small ops; off below sm_90 and for streams nobody registered). The kernel must follow the
// wait rule above whether or not this launch is dependent.
template <typename... Params, typename... Args>
cudaError_t launch_dependent_if_enabled(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                        cudaStream_t stream, Args... args) {
  return launch_maybe_dependent_with(kernel, grid, block, smem, stream, dependent_launches(stream), nullptr, args...);
}

// Raises Kernel's dynamic shared memory limit to `bytes` (the same every call) once per device:
// the attribute belongs to the current device, and setting it on every launch is a driver call
// on the hot path.
template <auto Kernel>
cudaError_t allow_dynamic_smem(size_t bytes) {
  static std::atomic<uint64_t> devices_done{0};
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (devices_done.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e == cudaSuccess) devices_done.fetch_or(bit, std::memory_order_release);
  return e;
}

// ---- device helpers ---------------------------------------------------------------------------

// griddepcontrol.wait: returns at once unless the kernel was launched as a programmatic dependent
// launch, then waits until the previous kernel in the stream completed and its writes are visible.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

inline constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}

// Same formulas as kernels/cpu/activation.h (full-precision expf/log1pf, no fast-math).
__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));
}
__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float softplus(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

// Grid-stride loop index helpers (64-bit, so n may exceed 2^32).
__device__ __forceinline__ size_t global_thread() {
  return size_t{blockIdx.x} * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t global_threads() {
  return size_t{gridDim.x} * blockDim.x;
}

}  // namespace ds::cuda::detail
