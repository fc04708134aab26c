// Minimal CUDA runtime queries used by tools and test skips.
#pragma once

namespace ds::cuda {
// Number of usable CUDA devices (0 when no driver or no GPU is present).
int device_count();
}  // namespace ds::cuda
