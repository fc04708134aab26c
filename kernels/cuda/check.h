// Turns a failed CUDA runtime call (or a launcher's status) into std::runtime_error naming the
// call, the source location and cudaGetErrorString. For host code that owns CUDA resources.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace ds::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda_error(e, call, file, line);
}

}  // namespace ds::cuda

#define DS_CUDA_CHECK(call) ::ds::cuda::check_cuda((call), #call, __FILE__, __LINE__)
