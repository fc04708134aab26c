// deltaserve-kernel-lab --prefill-ops: the prefill kernels of issue 9 round 2 side by side with
// the ones they replace, at the 9B shapes (one layer):
//   - chunked GDN prefill, one layer, f32 vs tensor cores (kernels/cuda/gdn_chunked.h, GdnPrep /
//     GdnMath; both, each alone, slab auto / 32 / 64) at 512/2048/8192 tokens, 16 k heads, 32 (9B) and 48 (27B) v
//     heads, 128 x 128, conv rows in the model's layout; plus the tc results' max error vs f32;
//   - Q8_0 -> bf16 dequantization v1 vs v2 (kernels/cuda/dequant_q8.h) on the GEMM weight
//     shapes; GB/s = (Q8_0 bytes read + bf16 bytes written) / time, % of the copy roof (kHbm).
// Same method as the rest of the lab: random inputs, one warm-up, median of --reps launches
// between CUDA events; dequantization rotates over weight copies larger than L2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// max |a - b| and max |b| over n floats into m[0], m[1] (as ordered int bits: both >= 0); a
// non-finite value anywhere in a or b makes m[0] +inf.
__global__ void max_diff(const float* a, const float* b, size_t n, int* m) {
  float d = 0.0f, s = 0.0f;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float x = fabsf(a[i] - b[i]);
    d = fmaxf(d, isfinite(x) ? x : INFINITY);
    s = fmaxf(s, fabsf(b[i]));
  }
  atomicMax(m, __float_as_int(d));
  atomicMax(m + 1, __float_as_int(s));
}

// max |a - b| / max |b| on the device.
double rel_diff(const float* a, const float* b, size_t n) {
  int* m = nullptr;
  LAB_CHECK(cudaMalloc(&m, 2 * sizeof(int)));
  LAB_CHECK(cudaMemset(m, 0, 2 * sizeof(int)));
  max_diff<<<512, 256>>>(a, b, n, m);
  int h[2] = {};
  LAB_CHECK(cudaMemcpy(h, m, sizeof(h), cudaMemcpyDeviceToHost));
  LAB_CHECK(cudaFree(m));
  float f[2];
  std::memcpy(f, h, sizeof(f));
  return f[1] > 0 ? f[0] / f[1] : f[0];
}

// One GDN layer per call (prep + state pass): old (prep v3 + state pass, f32) vs tensor cores
// (both halves, slab chosen from the SM count; each half alone; slab 32 / 64 forced), and the
// tensor-core results' max error vs the f32 kernels' from the same initial state (out, final
// state; relative to the f32 tensor's max).
void gdn_state_variants(int reps) {
  using ds::cuda::GdnMath;
  using ds::cuda::GdnPrep;
  const ds::cuda::GdnChunkedConfig configs[] = {{GdnPrep::kV3, GdnMath::kF32, 0},
                                                {GdnPrep::kTensorCores, GdnMath::kTensorCores, 0},
                                                {GdnPrep::kV3, GdnMath::kTensorCores, 0},
                                                {GdnPrep::kTensorCores, GdnMath::kF32, 0},
                                                {GdnPrep::kTensorCores, GdnMath::kTensorCores, 32},
                                                {GdnPrep::kTensorCores, GdnMath::kTensorCores, 64}};
  constexpr int kN = 6;
  const size_t nk = 16, d = 128;
  for (size_t nv : {size_t{32}, size_t{48}}) {
    for (size_t T : {size_t{512}, size_t{2048}, size_t{8192}}) {
      const size_t C = 2 * nk * d + nv * d, state_n = nv * d * d, out_n = T * nv * d;
      const ds::cuda::GdnShape s{T, nk, nv, d, d, C, C};
      float* conv = uniform(T * C, 8, -0.09f, 0.09f);  // |k| ~ 0.6 like the L2-normalized keys
      float* g = uniform(T * nv, 9, -0.3f, -0.001f);
      float* beta = uniform(T * nv, 10, 0.05f, 0.95f);
      float* state0 = uniform(state_n, 11, -0.5f, 0.5f);
      float *state[kN], *out[kN];
      double ms[kN] = {};
      for (int v = 0; v < kN; ++v) {
        LAB_CHECK(cudaMalloc(&state[v], state_n * sizeof(float)));
        LAB_CHECK(cudaMalloc(&out[v], out_n * sizeof(float)));
        auto call = [&] {
          LAB_CHECK(ds::cuda::gdn_chunked_configured(configs[v], s, conv, conv + nk * d, conv + 2 * nk * d, g, beta,
                                                     state[v], out[v], nullptr));
        };
        ms[v] = median_ms(reps, [&](int) { call(); });
        LAB_CHECK(cudaMemcpy(state[v], state0, state_n * sizeof(float), cudaMemcpyDeviceToDevice));
        call();  // from state0, for the error columns
      }
      LAB_CHECK(cudaDeviceSynchronize());
      std::printf(
          "gdn layer %2zu vh %5zu tok  us f32 %.1f | tc %.1f (x%.2f) | tc state only %.1f | tc prep only %.1f"
          " | tc slab32 %.1f | slab64 %.1f",
          nv, T, ms[0] * 1e3, ms[1] * 1e3, ms[0] / ms[1], ms[2] * 1e3, ms[3] * 1e3, ms[4] * 1e3, ms[5] * 1e3);
      std::printf("  err vs f32 (out/state) tc %.2g/%.2g state-only %.2g/%.2g prep-only %.2g/%.2g\n",
                  rel_diff(out[1], out[0], out_n), rel_diff(state[1], state[0], state_n),
                  rel_diff(out[2], out[0], out_n), rel_diff(state[2], state[0], state_n),
                  rel_diff(out[3], out[0], out_n), rel_diff(state[3], state[0], state_n));
      for (int v = 0; v < kN; ++v) {
        LAB_CHECK(cudaFree(state[v]));
        LAB_CHECK(cudaFree(out[v]));
      }
      for (float* p : {conv, g, beta, state0}) LAB_CHECK(cudaFree(p));
    }
  }
}

void dequant_variants(int reps) {
  struct Shape {
    const char* name;
    size_t rows, cols;
  };
  const Shape shapes[] = {{"ffn_up 12288x4096", 12288, 4096},
                          {"ffn_down 4096x12288", 4096, 12288},
                          {"qkv 8192x4096", 8192, 4096},
                          {"gate/out 4096x4096", 4096, 4096},
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
  gdn_state_variants(reps);
  dequant_variants(reps);
}
