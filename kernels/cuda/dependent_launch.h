// Which streams launch the decode path's small kernels as programmatic dependent launches (PDL,
// sm_90+): a kernel so launched may be scheduled while the previous kernel in its stream is still
// draining, hiding most of its launch latency (a batch-1 decode step has ~300 such kernels).
//
// A per-stream switch instead of a parameter on every op: the owner of a stream (CudaBackend, from
// CudaAblations::decode_pdl) turns it on once; every op launched on that stream consults it
// (common.cuh launch_dependent_if_enabled). Streams never registered launch ordinarily, so tests
// and tools that pass their own stream see no change.
#pragma once

#include <cuda_runtime.h>

namespace ds::cuda {

// Turns dependent launches of the converted kernels on or off for `stream` (nullptr, the legacy
// default stream, is a stream like any other). Thread-safe. The owner of a stream turns it off
// before destroying the stream, so a later stream with a recycled handle starts off. At most 64
// streams are on at once; further ones stay off (ordinary launches: correct, only slower).
void set_dependent_launches(cudaStream_t stream, bool on);

// Whether kernels launched on `stream` now go as dependent launches: registered on, and the
// current device is sm_90 or newer (elsewhere there is no such launch). Thread-safe and lock-free
// (a few atomic loads: it is asked once per launch).
bool dependent_launches(cudaStream_t stream);

}  // namespace ds::cuda
