// Pins the shared-memory hidden-state rings a CUDA worker reads (issue 12): the ring mapping is
// registered with cudaHostRegister, so the host-to-device copy of a chunk runs straight from its
// ring slot at full speed instead of through the driver's pageable staging buffer.
#pragma once

#include "common/ipc/hidden_transport.h"  // RingMappingHooks
#include "worker/daemon/worker_options.h"

namespace ds {

// Hooks for HiddenReceiver: register / unregister each ring mapping on a cuda worker. Empty
// hooks on a cpu worker or in a build without the CUDA backend. A failed registration is
// logged and the ring is used unpinned (slower, still correct).
ipc::RingMappingHooks pinned_ring_hooks(const WorkerOptions& options);

}  // namespace ds
