// Host-memory signals ordered in a CUDA stream (the driver's stream memory operations), for
// hidden-state ring slots shared between two worker processes: the producing stage's stream
// writes a slot's ready word right after the copy of its rows into the slot, and the consuming
// stage's stream waits for that word before its copy out of the slot. Neither host blocks, so
// the consumer's kernels are queued while the producer's are still running.
//
// The word must lie in host memory registered with cudaHostRegisterMapped (the ring mapping is,
// worker/daemon/pinned_ring.cpp). Where the driver lacks the operations (or the word is not
// mapped) the calls return an error and the caller falls back to host-side waits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

// Queues "*word = value" behind all earlier work of `stream`, after a memory fence so what that
// work wrote (the slot's rows) is visible to whoever sees the word.
cudaError_t stream_write_host_word(cudaStream_t stream, uint32_t* word, uint32_t value);

// Queues "wait until *word == value" in `stream`: later work of the stream starts only then.
cudaError_t stream_wait_host_word(cudaStream_t stream, const uint32_t* word, uint32_t value);

}  // namespace ds::cuda
