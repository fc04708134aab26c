// The CUDA backend: device memory from cudaMalloc, weights uploaded once from the GGUF mapping,
// every op a launcher from kernels/cuda on one stream. Only built with DELTASERVE_HAVE_CUDA.
#pragma once

#include <memory>

#include "worker/backend.h"

namespace ds {

// A backend on CUDA device `device`. Throws std::runtime_error when the device does not exist or a
// CUDA call fails (the message names the call, the source location and the CUDA error).
// bf16_prefill: run Q8_0 prefill products on bf16 tensor cores (f32 accumulation; opt-in
// until a well-conditioned fixture bounds its model-level error).
std::unique_ptr<Backend> make_cuda_backend(int device, bool bf16_prefill = false);

}  // namespace ds
