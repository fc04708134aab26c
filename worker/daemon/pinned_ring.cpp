// cudaHostRegister for shared-memory rings (see pinned_ring.h).
#include "worker/daemon/pinned_ring.h"

#include "common/log.h"

#if DS_HAVE_CUDA_BACKEND
#include <cuda_runtime.h>
#endif

namespace ds {

ipc::RingMappingHooks pinned_ring_hooks(const WorkerOptions& options) {
  ipc::RingMappingHooks hooks;
#if DS_HAVE_CUDA_BACKEND
  if (options.backend != "cuda") return hooks;
  const int device = options.device;
  hooks.mapped = [device](void* base, size_t bytes) {
    if (device >= 0) cudaSetDevice(device);
    // Portable: pinned for every context of the process, whichever device is current. Mapped:
    // a device may write / wait on a slot's ready word (kernels/cuda/stream_signal.h).
    const cudaError_t rc = cudaHostRegister(base, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
    if (rc != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later CUDA calls do not see it
      ds::log::warn("worker", ds::log::Msg() << "hidden-state ring not pinned (" << cudaGetErrorString(rc)
                                             << "); copies from it go through pageable staging");
    }
  };
  hooks.unmapping = [device](void* base) {
    // Queued work may still touch the mapping: an early hand-off's copy and ready-word write
    // (a cancelled or abandoned send hands its slot back before they ran). Let it finish first.
    if (device >= 0) cudaSetDevice(device);
    if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
    if (cudaHostUnregister(base) != cudaSuccess) cudaGetLastError();  // it was never registered
  };
#else
  (void)options;
#endif
  return hooks;
}

}  // namespace ds
