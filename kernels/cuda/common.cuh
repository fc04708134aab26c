// Internal helpers of the CUDA ops (not part of the public contract): argument checks done on
// the host before a launch, grid sizing, warp reductions and the scalar activations, written to
// match kernels/cpu (same formulas; only rounding order and libm ulps differ).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ds::cuda::detail {

// ---- host-side checks -------------------------------------------------------------------------

inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// A float array argument: present and 4-byte aligned (nullptr is only fine when nothing is read).
inline bool f32_ok(const float* p) { return p != nullptr && aligned_to(p, alignof(float)); }

// Status of the launch just queued (launch-configuration errors surface here, execution errors at
// the next synchronizing call).
inline cudaError_t launch_status() { return cudaGetLastError(); }

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
// kernel wrote (or writes anything it may still read).
template <typename... Params, typename... Args>
cudaError_t launch_maybe_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                   bool dependent, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (dependent) {
    config.attrs = &attr;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
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
  const cudaError_t e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
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
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Grid-stride loop index helpers (64-bit, so n may exceed 2^32).
__device__ __forceinline__ size_t global_thread() { return size_t{blockIdx.x} * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t global_threads() { return size_t{gridDim.x} * blockDim.x; }

}  // namespace ds::cuda::detail
