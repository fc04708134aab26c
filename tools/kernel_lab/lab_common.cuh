// What the kernel lab's sections share (kernel_lab.cu, small_gemm_lab.cu): the device ceilings, a
// checked CUDA call, random device data and the median timer (METHOD.md: one warm-up launch, then
// N timed launches between CUDA events), and rotated Q8_0 matrices larger than L2 together.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/matmul.h"

namespace ds::kernel_lab {

inline constexpr double kHbm = 4.3e12, kBf16 = 790e12;

#define LAB_CHECK(x)                                                                          \
  do {                                                                                        \
    const cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

static __device__ uint32_t hash(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

// Q8_0 bytes: every 34-byte block gets an fp16 scale in [2^-9, 2^-6) and random int8 quants.
static __global__ void fill_q8(uint8_t* p, size_t n_blocks, uint32_t seed) {
  for (size_t b = blockIdx.x * size_t{blockDim.x} + threadIdx.x; b < n_blocks; b += size_t{gridDim.x} * blockDim.x) {
    uint8_t* blk = p + b * 34;
    const uint16_t d = static_cast<uint16_t>(0x1800 + (hash(b, seed) & 0x7FF));  // ~2^-9 .. 2^-8
    blk[0] = static_cast<uint8_t>(d & 0xFF);
    blk[1] = static_cast<uint8_t>(d >> 8);
    for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(hash(b * 32 + i, seed + 1) % 255);
  }
}

static __global__ void fill_f32(float* p, size_t n, uint32_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    p[i] = lo + (hi - lo) * (hash(i, seed) >> 8) * (1.0f / 16777216.0f);
  }
}

template <class F>
double median_ms(int reps, F&& launch) {
  cudaEvent_t a, b;
  LAB_CHECK(cudaEventCreate(&a));
  LAB_CHECK(cudaEventCreate(&b));
  launch(0);
  LAB_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    LAB_CHECK(cudaEventRecord(a));
    launch(r + 1);
    LAB_CHECK(cudaEventRecord(b));
    LAB_CHECK(cudaEventSynchronize(b));
    float t = 0;
    LAB_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  LAB_CHECK(cudaEventDestroy(a));
  LAB_CHECK(cudaEventDestroy(b));
  return ms[ms.size() / 2];
}

// Enough copies of one random Q8_0 matrix (one allocation) that rotating over them exceeds L2.
struct Q8Matrix {
  size_t rows, cols, row_bytes, bytes, n_copies;
  uint8_t* base = nullptr;
  Q8Matrix(size_t r, size_t c, size_t min_set_bytes) : rows(r), cols(c), row_bytes(c / 32 * 34) {
    bytes = rows * row_bytes;
    n_copies = std::max<size_t>(1, (min_set_bytes + bytes - 1) / bytes);
    LAB_CHECK(cudaMalloc(&base, bytes * n_copies));
    fill_q8<<<1024, 256>>>(base, n_copies * rows * cols / 32, 7);
  }
  ~Q8Matrix() { cudaFree(base); }
  // type Q8_0_SPLIT reads the same random bytes as split rows (timing only; values don't matter).
  ds::cuda::WeightView view(int i, ds::GgmlType type = ds::GgmlType::Q8_0) const {
    return {type, base + (static_cast<size_t>(i) % n_copies) * bytes, rows, cols, row_bytes};
  }
};

inline float* device_f32(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  float* p = nullptr;
  LAB_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)));
  fill_f32<<<1024, 256>>>(p, n, seed, lo, hi);
  return p;
}

// A matrix of one model step: its shape and how many times a step reads it (the step's bytes).
struct StepShape {
  const char* name;
  size_t rows, cols, per_step;
};

}  // namespace ds::kernel_lab
