// Minimal CUDA runtime queries used by tools and test skips.
#pragma once

#include <cstddef>

namespace ds::cuda {
// Number of usable CUDA devices (0 when no driver or no GPU is present).
int device_count();
// Free and total memory of `device` in bytes; false when it cannot be queried.
bool device_memory(int device, size_t* free_bytes, size_t* total_bytes);
// Whether the current device is compute capability 9.0 or newer (thread-block clusters,
// programmatic dependent launch); cached per device, false when it cannot be queried.
bool current_device_is_sm90_or_newer();
// Streaming multiprocessors of the current device, cached per device (launch geometry on hot
// paths); 132 (an H100/H200) when it cannot be queried.
int current_device_sm_count();
}  // namespace ds::cuda
