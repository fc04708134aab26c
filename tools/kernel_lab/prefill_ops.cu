// deltaserve-kernel-lab --prefill-ops: the prefill kernels of issue 9 round 2 side by side with
// the ones they replace, at the 9B shapes (one layer):
//   - chunked GDN prefill, prep v2 vs v3 (kernels/cuda/gdn_chunked.h, GdnPrep), 512/2048/8192
//     tokens, 16 k heads, 32 v heads, 128 x 128, conv rows 8192 floats (the model's layout);
//   - Q8_0 -> bf16 dequantization v1 vs v2 (kernels/cuda/dequant_q8.h) on the GEMM weight
//     shapes; GB/s = (Q8_0 bytes read + bf16 bytes written) / time, % of the 4.3 TB/s copy roof.
// Same method as the rest of the lab: random inputs, one warm-up, median of --reps launches
// between CUDA events; dequantization rotates over weight copies larger than L2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/gdn_chunked.h"
#include "kernels/cuda/matmul.h"
#include "tools/kernel_lab/lab_common.cuh"
#include "tools/kernel_lab/prefill_ops.h"

namespace {

using namespace ds::kernel_lab;

__device__ uint32_t mix(size_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ (seed * 40503u + static_cast<uint32_t>(i >> 32));
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

__global__ void fill_uniform(float* p, size_t n, uint32_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    p[i] = lo + (hi - lo) * (mix(i, seed) >> 8) * (1.0f / 16777216.0f);
  }
}

// Q8_0 blocks with a small positive fp16 scale (0x2000 ~ 0.0078) and random int8 values.
__global__ void fill_q8_blocks(uint8_t* p, size_t n_blocks, uint32_t seed) {
  for (size_t b = blockIdx.x * size_t{blockDim.x} + threadIdx.x; b < n_blocks; b += size_t{gridDim.x} * blockDim.x) {
    uint8_t* blk = p + b * 34;
    blk[0] = 0x00;
    blk[1] = 0x20;
    for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(mix(b * 32 + i, seed));
  }
}

float* uniform(size_t n, uint32_t seed, float lo, float hi) {
  float* p = nullptr;
  LAB_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)));
  fill_uniform<<<1024, 256>>>(p, n, seed, lo, hi);
  return p;
}

void gdn_prep_variants(int reps) {
  const size_t nk = 16, nv = 32, d = 128, C = 2 * nk * d + nv * d;
  for (size_t T : {size_t{512}, size_t{2048}, size_t{8192}}) {
    const ds::cuda::GdnShape s{T, nk, nv, d, d, C, C};
    float* conv = uniform(T * C, 8, -0.09f, 0.09f);  // |k| ~ 1 like the L2-normalized keys
    float* g = uniform(T * nv, 9, -1.0f, -0.01f);
    float* beta = uniform(T * nv, 10, 0.05f, 0.95f);
    float* state = uniform(nv * d * d, 11, -0.5f, 0.5f);
    float* out = uniform(T * nv * d, 12, 0.0f, 1.0f);
    double ms[2] = {};
    for (int v = 0; v < 2; ++v) {
      const auto prep = v == 0 ? ds::cuda::GdnPrep::kV2 : ds::cuda::GdnPrep::kV3;
      ms[v] = median_ms(reps, [&](int) {
        LAB_CHECK(ds::cuda::gdn_chunked_with_prep(prep, s, conv, conv + nk * d, conv + 2 * nk * d, g, beta, state, out,
                                                 nullptr));
      });
    }
    std::printf("gdn chunked %5zu tok prep v2 / v3     %9.1f / %.1f us  (%.0f / %.0f tok/s, x%.2f)\n", T,
                ms[0] * 1e3, ms[1] * 1e3, T / (ms[0] * 1e-3), T / (ms[1] * 1e-3), ms[0] / ms[1]);
    for (float* p : {conv, g, beta, state, out}) LAB_CHECK(cudaFree(p));
  }
}

void dequant_variants(int reps) {
  struct Shape {
    const char* name;
    size_t rows, cols;
  };
  const Shape shapes[] = {{"ffn_up 12288x4096", 12288, 4096}, {"ffn_down 4096x12288", 4096, 12288},
                          {"qkv 8192x4096", 8192, 4096},      {"gate/out 4096x4096", 4096, 4096},
                          {"attn_k/v 1024x4096", 1024, 4096}};
  for (const Shape& sh : shapes) {
    const size_t row_bytes = sh.cols / 32 * 34, bytes = sh.rows * row_bytes;
    const size_t copies = std::max<size_t>(1, (size_t{256} << 20) / bytes);  // > L2 over the rotation
    uint8_t* q8 = nullptr;
    void* out = nullptr;
    LAB_CHECK(cudaMalloc(&q8, bytes * copies));
    LAB_CHECK(cudaMalloc(&out, sh.rows * sh.cols * 2));
    fill_q8_blocks<<<1024, 256>>>(q8, copies * sh.rows * sh.cols / 32, 7);
    double ms[2] = {};
    for (int v = 0; v < 2; ++v) {
      ms[v] = median_ms(reps, [&](int i) {
        const ds::cuda::WeightView w{ds::GgmlType::Q8_0, q8 + (static_cast<size_t>(i) % copies) * bytes, sh.rows,
                                     sh.cols, row_bytes};
        LAB_CHECK(ds::cuda::dequantize_q8_to_bf16(w, out, nullptr, v == 1));
      });
    }
    const double moved = static_cast<double>(bytes + sh.rows * sh.cols * 2);
    std::printf("dequant q8->bf16 %-20s v1 / v2 %7.1f / %.1f us  (%.2f / %.2f TB/s, %.0f%% / %.0f%%)\n", sh.name,
                ms[0] * 1e3, ms[1] * 1e3, moved / (ms[0] * 1e-3) / 1e12, moved / (ms[1] * 1e-3) / 1e12,
                100 * moved / (ms[0] * 1e-3) / kHbm, 100 * moved / (ms[1] * 1e-3) / kHbm);
    LAB_CHECK(cudaFree(q8));
    LAB_CHECK(cudaFree(out));
  }
}

}  // namespace

void prefill_ops(int reps) {
  gdn_prep_variants(reps);
  dequant_variants(reps);
}
