// Test kernels that make a missing griddepcontrol.wait observable (test_cuda_dependent_launch.cpp).
//
// Without help, a dependent launch starts only as the previous kernel's blocks exit, so a kernel
// that skipped its wait would usually still read the right data and a bit comparison would rarely
// catch it. launch_late_copy releases the next kernel at once (griddepcontrol.launch_dependents as
// its first instruction), then sleeps `delay_us` before it writes: a dependent kernel that reads
// before waiting sees the old contents of dst.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace ds::cuda::test {

// dst[i] = src[i] for n 32-bit words, written only after ~delay_us; the next kernel in the stream
// may start (if launched dependent) as soon as this one is resident. An ordinary launch.
cudaError_t launch_late_copy(const void* src, void* dst, size_t n_words, unsigned delay_us, cudaStream_t stream);

// The control: dst[i] = src[i] launched as a dependent launch that never waits (what a converted
// kernel without its wait would do). After launch_late_copy into src it copies stale words.
cudaError_t launch_copy_without_wait(const void* src, void* dst, size_t n_words, cudaStream_t stream);

}  // namespace ds::cuda::test
