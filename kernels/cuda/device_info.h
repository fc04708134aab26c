// Minimal CUDA runtime queries used by tools and test skips.
#pragma once

#include <cstddef>

namespace ds::cuda {
// Number of usable CUDA devices (0 when no driver or no GPU is present).
int device_count();
// Free and total memory of `device` in bytes; false when it cannot be queried.
bool device_memory(int device, size_t* free_bytes, size_t* total_bytes);
}  // namespace ds::cuda
