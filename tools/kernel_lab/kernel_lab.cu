// deltaserve-kernel-lab: kernel-level speed of ds::cuda::matmul (Q8_0) and ds::cuda GDN at the
// Qwen3.5 9B shapes, against the measured H200 ceilings (4.3 TB/s copy, 790 TFLOP/s bf16 dense).
//
//   deltaserve-kernel-lab [--reps N]
//
// Method (METHOD.md): random inputs (never zeros), one warm-up launch, then N timed launches
// between CUDA events, median reported; weights rotate over enough copies that the set exceeds
// the 50 MB L2, so GEMV figures are HBM figures. GEMV bytes = Q8_0 weight bytes + x + y; GEMM
// FLOPs = 2 M N K; GDN bytes = state read + written once + q/k/v/out.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cuda/gdn.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matmul_fast.h"

namespace {

constexpr double kHbm = 4.3e12, kBf16 = 790e12;

#define LAB_CHECK(x)                                                                          \
  do {                                                                                        \
    const cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

__device__ uint32_t hash(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

// Q8_0 bytes: every 34-byte block gets an fp16 scale in [2^-9, 2^-6) and random int8 quants.
__global__ void fill_q8(uint8_t* p, size_t n_blocks, uint32_t seed) {
  for (size_t b = blockIdx.x * size_t{blockDim.x} + threadIdx.x; b < n_blocks; b += size_t{gridDim.x} * blockDim.x) {
    uint8_t* blk = p + b * 34;
    const uint16_t d = static_cast<uint16_t>(0x1800 + (hash(b, seed) & 0x7FF));  // ~2^-9 .. 2^-8
    blk[0] = static_cast<uint8_t>(d & 0xFF);
    blk[1] = static_cast<uint8_t>(d >> 8);
    for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(hash(b * 32 + i, seed + 1) % 255);
  }
}

__global__ void fill_f32(float* p, size_t n, uint32_t seed, float lo, float hi) {
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

struct Q8Matrix {
  size_t rows, cols, row_bytes;
  std::vector<uint8_t*> copies;
  Q8Matrix(size_t r, size_t c, size_t min_set_bytes) : rows(r), cols(c), row_bytes(c / 32 * 34) {
    const size_t bytes = rows * row_bytes;
    const size_t n = std::max<size_t>(1, (min_set_bytes + bytes - 1) / bytes);
    for (size_t i = 0; i < n; ++i) {
      uint8_t* p = nullptr;
      LAB_CHECK(cudaMalloc(&p, bytes));
      fill_q8<<<1024, 256>>>(p, rows * cols / 32, static_cast<uint32_t>(7 + i));
      copies.push_back(p);
    }
  }
  ~Q8Matrix() {
    for (uint8_t* p : copies) cudaFree(p);
  }
  ds::cuda::WeightView view(int i) const {
    return {ds::GgmlType::Q8_0, copies[static_cast<size_t>(i) % copies.size()], rows, cols, row_bytes};
  }
};

float* device_f32(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  float* p = nullptr;
  LAB_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)));
  fill_f32<<<1024, 256>>>(p, n, seed, lo, hi);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::atoi(argv[++i]);
  }
  cudaDeviceProp prop{};
  LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::printf("%-34s %10s %10s %8s\n", "kernel", "time_us", "rate", "roofline");

  // ---- GEMV (decode), 9B matrices: ffn gate/up, ffn down, LM head ----
  struct Shape {
    const char* name;
    size_t rows, cols;
  };
  const Shape gemv_shapes[] = {
      {"ffn_up 12288x4096", 12288, 4096}, {"ffn_down 4096x12288", 4096, 12288}, {"lm_head 248320x4096", 248320, 4096}};
  for (const Shape& sh : gemv_shapes) {
    const Q8Matrix w(sh.rows, sh.cols, size_t{256} << 20);
    float* x = device_f32(8 * sh.cols, 3);
    float* y = device_f32(8 * sh.rows, 4);
    for (size_t n : {size_t{1}, size_t{8}}) {
      const double ms =
          median_ms(reps, [&](int i) { LAB_CHECK(ds::cuda::matmul(w.view(i), x, sh.cols, n, y, sh.rows, nullptr)); });
      const double bytes = static_cast<double>(sh.rows * w.row_bytes) + 4.0 * n * (sh.cols + sh.rows);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("gemv n=%zu %-25s %10.1f %7.0f GB/s %7.1f%%\n", n, sh.name, ms * 1e3, gbs, 100 * gbs * 1e9 / kHbm);
    }
    LAB_CHECK(cudaFree(x));
    LAB_CHECK(cudaFree(y));
  }

  // ---- GEMM (prefill) on tensor cores ----
  const Shape gemm_shapes[] = {{"ffn_up 12288x4096", 12288, 4096}, {"ffn_down 4096x12288", 4096, 12288}};
  for (const Shape& sh : gemm_shapes) {
    const Q8Matrix w(sh.rows, sh.cols, 0);
    for (size_t n : {size_t{512}, size_t{2048}, size_t{8192}}) {
      float* x = device_f32(n * sh.cols, 5);
      float* y = device_f32(n * sh.rows, 6);
      // bf16 tensor cores (the opt-in path, called directly), and at 2048 the default f32 SIMT GEMM.
      for (bool tc : {true, false}) {
        if (!tc && n != 2048) continue;
        const double ms = median_ms(tc ? std::max(3, reps / 2) : 3, [&](int) {
          if (tc) {
            LAB_CHECK(ds::cuda::detail::gemm_q8_tc(w.view(0), x, sh.cols, n, y, sh.rows, nullptr));
          } else {
            LAB_CHECK(ds::cuda::matmul(w.view(0), x, sh.cols, n, y, sh.rows, nullptr));
          }
        });
        const double tf = 2.0 * sh.rows * sh.cols * n / (ms * 1e-3) / 1e12;
        std::printf("gemm %s n=%-5zu %-17s %10.1f %6.1f TFLOP/s %6.1f%%\n", tc ? "tc  " : "simt", n, sh.name, ms * 1e3,
                    tf, 100 * tf * 1e12 / kBf16);
      }
      LAB_CHECK(cudaFree(x));
      LAB_CHECK(cudaFree(y));
    }
  }

  // ---- GDN, one 9B layer (16 k heads, 32 v heads, 128 x 128) ----
  for (size_t T : {size_t{1}, size_t{512}, size_t{2048}}) {
    const size_t nk = 16, nv = 32, dk = 128, dv = 128, C = 2 * nk * dk + nv * dv;
    const ds::cuda::GdnShape s{T, nk, nv, dk, dv, C, C};
    float* conv = device_f32(T * C, 8, -0.09f, 0.09f);  // |k| ~ 1 like the L2-normalized keys
    float* g = device_f32(T * nv, 9, -1.0f, -0.01f);
    float* beta = device_f32(T * nv, 10, 0.05f, 0.95f);
    float* state = device_f32(nv * dk * dv, 11, -0.5f, 0.5f);
    float* out = device_f32(T * nv * dv, 12);
    const double ms = median_ms(reps, [&](int) {
      const auto f = T == 1 ? ds::cuda::gdn_recurrent : ds::cuda::gdn_prefill;
      LAB_CHECK(f(s, conv, conv + nk * dk, conv + 2 * nk * dk, g, beta, state, out, nullptr));
    });
    const double bytes = 2.0 * nv * dk * dv * 4 + 4.0 * T * (C + nv * dv + 2 * nv);
    if (T == 1) {
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("gdn decode 1 tok (1 layer)          %10.1f %7.0f GB/s %7.1f%%\n", ms * 1e3, gbs,
                  100 * gbs * 1e9 / kHbm);
    } else {
      std::printf("gdn prefill %5zu tok (1 layer)     %10.1f %7.0f tok/s\n", T, ms * 1e3, T / (ms * 1e-3));
    }
    for (float* p : {conv, g, beta, state, out}) LAB_CHECK(cudaFree(p));
  }
  return 0;
}
